"""Tool calls parsed from generated text: by default only when the turn renders back to that exact text;
under MOCK_CHAT_RULES=qwen3 as vLLM's hermes parser splits it (`parse_hermes`), round trip or not.

The model's text form of a call is `<tool_call>\n{"name": "<name>", "arguments": <json object>}\n</tool_call>`
(the hermes shape vLLM's `hermes` parser reads). Content is the text before the first call. A parse is
accepted only if rendering `{content, tool_calls}` through the chat template reproduces the generated
text byte for byte: otherwise the next request (the agent sends this turn back) would tokenize
differently from what was sampled and the rollout would fork. Anything that fails that is returned as
plain content, which always round-trips.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass

from mock_engine.tokenizer import TOOL_CALL_CLOSE, TOOL_CALL_OPEN

_CALL = re.compile(
    re.escape(TOOL_CALL_OPEN) + r'\{"name": "([A-Za-z0-9_.\-]+)", "arguments": (.*?)\}' + re.escape(TOOL_CALL_CLOSE),
    re.DOTALL,
)


@dataclass(frozen=True)
class Parsed:
    content: str | None
    tool_calls: list[dict]


def format_call(name: str, arguments: dict) -> str:
    """The exact text of one tool call, as the scripted mode emits it (ASCII-only JSON)."""
    return f'{TOOL_CALL_OPEN}{{"name": "{name}", "arguments": {json.dumps(arguments)}}}{TOOL_CALL_CLOSE}'


def render_assistant(content: str | None, tool_calls: list[dict]) -> str:
    """What the chat template renders between `<|im_start|>assistant\\n` and `<|im_end|>` (kept in step
    with tokenizer.CHAT_TEMPLATE; tests/integration compare the two)."""
    out = content or ""
    for call in tool_calls:
        fn = call["function"]
        out += f'{TOOL_CALL_OPEN}{{"name": "{fn["name"]}", "arguments": {fn["arguments"]}}}{TOOL_CALL_CLOSE}'
    return out


def parse(text: str, tools_offered: bool) -> Parsed:
    """Split generated text (without the end-of-turn token) into content and OpenAI-shaped tool calls."""
    if not tools_offered or TOOL_CALL_OPEN not in text:
        return Parsed(text, [])
    first = text.index(TOOL_CALL_OPEN)
    content, rest = text[:first], text[first:]
    calls: list[dict] = []
    pos = 0
    while pos < len(rest):
        match = _CALL.match(rest, pos)
        if not match:
            return Parsed(text, [])
        name, arguments = match.group(1), match.group(2)
        try:
            if not isinstance(json.loads(arguments), dict):
                return Parsed(text, [])
        except ValueError:
            return Parsed(text, [])
        calls.append(
            {
                "id": f"chatcmpl-tool-{uuid.uuid4().hex[:24]}",
                "type": "function",
                "function": {"name": name, "arguments": arguments},
            }
        )
        pos = match.end()
    if render_assistant(content, calls) != text:
        return Parsed(text, [])
    return Parsed(content or None, calls)


# vLLM 0.31's Hermes2ProToolParser.extract_tool_calls, as read: a call is `<tool_call>JSON</tool_call>` (or an
# unclosed `<tool_call>JSON` at the end); every JSON must load and carry name and arguments, or the whole text is
# content with no call. Content is the text before the first `<tool_call>`, NOT stripped, None when empty;
# arguments are re-serialised with json.dumps(ensure_ascii=False). No round-trip check: that is what makes a
# template that renders history differently fork, on the GPU and here alike.
_HERMES = re.compile(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*)", re.DOTALL)
CALL_START = "<tool_call>"


def parse_hermes(text: str, tools_offered: bool) -> Parsed:
    """Split generated text (without the end-of-turn token) into content and tool calls as vLLM's hermes does."""
    if not tools_offered or CALL_START not in text:
        return Parsed(text, [])
    calls: list[dict] = []
    try:
        for closed, unclosed in _HERMES.findall(text):
            doc = json.loads(closed or unclosed)
            calls.append(
                {
                    "id": f"chatcmpl-tool-{uuid.uuid4().hex[:24]}",
                    "type": "function",
                    "function": {"name": doc["name"], "arguments": json.dumps(doc["arguments"], ensure_ascii=False)},
                }
            )
    except (ValueError, KeyError, TypeError):
        return Parsed(text, [])
    content = text[: text.index(CALL_START)]
    return Parsed(content or None, calls)
