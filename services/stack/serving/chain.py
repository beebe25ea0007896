"""Whether turns chain: the start-up check that a multi-turn tool conversation trains as one sample.

A rollout trains as one sample only if each turn's prompt ids start with the previous prompt's ids plus the
ids the engine sampled. Whether they do is decided by four parties, none of which sees the others:
  - the engine's parsers split the reply: vLLM 0.31's hermes (and qwen3_coder) parser keeps the text before
    the first `<tool_call>` as `content`, unstripped, None when empty, and re-serialises the arguments
    with json.dumps; a reasoning parser (qwen3, deepseek_r1) moves the think block out of `content`;
  - mini-swe-agent 2.4.6 sends its history back: the assistant turn is `message.model_dump()` (content as
    the engine gave it), observations are `role: tool`;
  - the capture front layer passes messages on untouched (env_server/chat_fields.py drops only top-level
    fields, `chat_template_kwargs` among them, so the engine's --default-chat-template-kwargs governs);
  - vLLM renders the next prompt with the chat template (None content renders as "", as vLLM's string
    content format joins no parts; tool-call arguments are parsed back to a dict, `_postprocess_messages`).
Two seed runs each lost a night to a template that re-rendered history differently (docs/PRODUCTION-
DEFAULTS.md has the table). This module replays that path with the served tokenizer and template and
compares TOKEN IDS, since a string prefix can still tokenize differently across the boundary (a reply
ending in "\\n" followed by the template's "\\n" is one BPE token, not two).

The reply the synthetic model "samples" is the template's own rendering of an assistant turn at the last
position (what the model was trained to write), cut after the generation prompt: so the check needs no
knowledge of a family's call format. Two replies are tried: a call alone, and a line of text then a call
(whether a model writes such text depends on the model and the agent's prompt; the served setup must not).

Standard library only: the tokenizer is any object with transformers' `apply_chat_template(tokenize=False)`,
`encode(add_special_tokens=False)` and `convert_ids_to_tokens` (the engine image has transformers).
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

from stack import facts

# The parsers whose split this check replays (vLLM 0.31: Hermes2ProToolParser, Qwen3CoderToolParser both
# cut `content` at the first `<tool_call>`; Qwen3ReasoningParser / DeepSeekR1ReasoningParser at `</think>`).
TOOL_PARSERS = ("hermes", "qwen3_coder")
REASONING_PARSERS = ("qwen3", "deepseek_r1")
CALL_START = "<tool_call>"
THINK_START, THINK_END = "<think>", "</think>"
TURNS = 3
# The verdict line for the healthcheck (a fresh process each time), beside turn_end.RECORD.
RECORD = Path(tempfile.gettempdir()) / "asyncgrpo-engine-chain"

SYSTEM = "You are a helpful assistant that can interact with a computer.\n"
TASK = "Please solve this issue: the tests in tests/ fail.\n\nYou can execute bash commands."
BASH_TOOL = facts.MINI_SWE_AGENT_BASH_TOOL
COMMANDS = ("ls -la", "cat setup.py | head -n 20", "python -m pytest -q tests/")
REASONING = "I should look at the files first, then run the tests."
TEXT = "Let me look at the repository."
OBSERVATION = '{\n  "returncode": 0,\n  "output": "README.md\\nsetup.py\\ntests\\n"\n}'


@dataclass(frozen=True)
class Verdict:
    chains: bool
    line: str  # one line: what was checked and, when it forks, which rule breaks the chain and the fix
    checked: bool = True  # False: this configuration cannot be replayed (an unknown parser)


def _thinking(template: str, kwargs: dict) -> bool:
    return THINK_END in template and kwargs.get("enable_thinking", True) is not False


def _render(tokenizer, messages, kwargs, add_generation_prompt: bool) -> str:
    return tokenizer.apply_chat_template(
        messages, tools=[BASH_TOOL], tokenize=False, add_generation_prompt=add_generation_prompt, **kwargs
    )


def _call(k: int) -> dict:
    return {"name": "bash", "arguments": {"command": COMMANDS[k % len(COMMANDS)]}}


def _model_reply(
    tokenizer, template, history, kwargs, k: int, with_text: bool, end_text: str, think: str | None = None
) -> tuple[str, str]:
    """(the text the model writes for turn k, "") or ("", why the template cannot say): the template's own
    rendering of an assistant turn at the last position, after the generation prompt, before the turn end.
    `think`: the think block the model writes (None: one with reasoning when the template thinks; "": none)."""
    if think is None:
        think = f"{THINK_START}\n{REASONING}\n{THINK_END}\n\n" if _thinking(template, kwargs) else ""
    content = think + (TEXT if with_text else "")
    call = _call(k)
    turn = {"role": "assistant", "content": content, "tool_calls": [{"type": "function", "function": call}]}
    prompt = _render(tokenizer, history, kwargs, True)
    full = _render(tokenizer, [*history, turn], kwargs, False)
    if not full.startswith(prompt):
        at = next((i for i, (a, b) in enumerate(zip(prompt, full)) if a != b), min(len(prompt), len(full)))
        return "", (
            f"the template's generation prompt is not how it renders the assistant turn it starts "
            f"(prompt ...{prompt[max(0, at - 24) : at + 8]!r} vs turn ...{full[max(0, at - 24) : at + 8]!r})"
        )
    reply = full[len(prompt) :]
    if think == "" and reply.startswith(THINK_START) and THINK_END in reply:
        # A template renders its last turn's think block even when empty; this model wrote none.
        reply = reply.split(THINK_END, 1)[1].lstrip("\n")
    cut = reply.rfind(end_text)
    if cut < 0:
        return "", f"the template does not close an assistant turn with {end_text!r}"
    return reply[:cut], ""


def engine_message(reply: str, reasoning_parser: str, k: int) -> dict:
    """The assistant message vLLM 0.31 returns for `reply`, as mini-swe-agent sends it back (model_dump():
    content unstripped; the reasoning field it does not send back, so history loses it)."""
    text = reply
    if reasoning_parser and THINK_END in text:
        before, _, text = text.partition(THINK_END)  # the reasoning leaves the message
    at = text.find(CALL_START)
    content = text[:at] if at >= 0 else text
    call = _call(k)
    return {
        "role": "assistant",
        "content": content or None,
        "tool_calls": [
            {
                "id": f"chatcmpl-tool-{k}",
                "type": "function",
                "function": {"name": call["name"], "arguments": json.dumps(call["arguments"], ensure_ascii=False)},
            }
        ],
    }


def _arguments(raw):
    """vLLM's `_postprocess_messages`: a JSON string becomes its object; empty is {}; an object stays."""
    if isinstance(raw, str):
        return json.loads(raw) if raw.strip() else {}
    return {} if raw is None else raw


def as_vllm_renders(message: dict) -> dict:
    """What the template receives for a message vLLM parsed: None content as "", arguments as a dict."""
    out = dict(message)
    if out.get("content") is None:
        out["content"] = ""
    if out.get("tool_calls"):
        out["tool_calls"] = [
            {**c, "function": {**c["function"], "arguments": _arguments(c["function"].get("arguments"))}}
            for c in out["tool_calls"]
        ]
    return out


def _first_difference(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def replay(
    tokenizer,
    template: str,
    kwargs: dict,
    reasoning_parser: str,
    with_text: bool,
    end_id: int,
    think: str | None = None,
) -> str:
    """ "" when TURNS turns chain, else where and how the first one forks."""
    end_text = str(tokenizer.convert_ids_to_tokens(end_id))
    history: list[dict] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TASK}]
    for k in range(TURNS):
        reply, why = _model_reply(tokenizer, template, history, kwargs, k, with_text, end_text, think)
        if why:
            return f"turn {k + 1}: {why}"
        prompt_ids = tokenizer.encode(_render(tokenizer, history, kwargs, True), add_special_tokens=False)
        sampled = tokenizer.encode(reply, add_special_tokens=False) + [end_id]
        sent = engine_message(reply, reasoning_parser, k)
        history = [
            *history,
            as_vllm_renders(sent),
            {"role": "tool", "content": OBSERVATION, "tool_call_id": sent["tool_calls"][0]["id"]},
        ]
        expected = prompt_ids + sampled
        got = tokenizer.encode(_render(tokenizer, history, kwargs, True), add_special_tokens=False)
        if got[: len(expected)] != expected:
            at = _first_difference(expected, got)
            show = tokenizer.convert_ids_to_tokens
            return (
                f"turn {k + 2}'s prompt does not start with turn {k + 1}'s prompt and sampled ids: at token "
                f"{at} it has {show(got[at : at + 4])} where the engine sampled {show(expected[at : at + 4])}"
            )
    return ""


def rule(tokenizer, template: str, kwargs: dict, reasoning_parser: str, with_text: bool) -> str:
    """The rule that breaks the chain, and its fix, for a replay that forked (the first that applies). A fork
    with text before the call comes after the call-alone replay chained, so the separator is the cause."""
    thinking = THINK_END in template
    if reasoning_parser:
        return (
            f"REASONING_PARSER={reasoning_parser} moves the think block out of the reply's content and the agent "
            "sends back content only, so history loses it; leave REASONING_PARSER empty"
        )
    if with_text:
        return (
            "the template adds its own separator before a call after the text the tool-call parser kept "
            "(unstripped, as vLLM's parsers keep it); serve the derived template (CHAT_TEMPLATE_FIX=auto)"
        )
    if thinking and kwargs.get("enable_thinking", True) is False:
        return (
            "CHAT_TEMPLATE_KWARGS turns thinking off: the generation prompt ends with an empty think block that "
            "the template does not render for history turns; serve the derived template (CHAT_TEMPLATE_FIX=auto) "
            "or leave CHAT_TEMPLATE_KWARGS empty"
        )
    if thinking:
        return (
            "the template drops or rewrites history's think blocks (its last-user-message gate); serve the "
            "derived template (CHAT_TEMPLATE_FIX=auto)"
        )
    return "the template renders history differently from what the engine sampled; serve a template that does not"


def check(
    tokenizer, template: str, kwargs: dict, reasoning_parser: str, tool_parser: str, end_id: int | None
) -> Verdict:
    """Replay the conversation with and without text before each call; one line either way."""
    setup = f"TOOL_CALL_PARSER={tool_parser}, REASONING_PARSER={reasoning_parser or '(none)'}, " + (
        f"CHAT_TEMPLATE_KWARGS={json.dumps(kwargs, separators=(',', ':'))}" if kwargs else "CHAT_TEMPLATE_KWARGS empty"
    )
    if tool_parser not in TOOL_PARSERS:
        return Verdict(
            False,
            f"turns NOT CHECKED: TOOL_CALL_PARSER={tool_parser} is not one this check replays "
            f"({', '.join(TOOL_PARSERS)}); whether rollouts fork shows only in rollout/fork_frac",
            False,
        )
    if reasoning_parser and reasoning_parser not in REASONING_PARSERS:
        return Verdict(
            False,
            f"turns NOT CHECKED: REASONING_PARSER={reasoning_parser} is not one this check "
            f"replays ({', '.join(REASONING_PARSERS)})",
            False,
        )
    if end_id is None:
        return Verdict(
            False, "turns NOT CHECKED: the chat template's turn end is unknown (see the turn-end line)", False
        )
    for with_text in (False, True):
        try:
            where = replay(tokenizer, template, kwargs, reasoning_parser, with_text, end_id)
        except Exception as exc:  # a template may raise anything (jinja's own exceptions included)
            where = f"the chat template failed to render the conversation ({type(exc).__name__}: {exc})"
        if where:
            shape = "text then a call" if with_text else "a call alone"
            return Verdict(
                False,
                f"turns FORK ({setup}; reply: {shape}): {where}. Rule: "
                f"{rule(tokenizer, template, kwargs, reasoning_parser, with_text)}",
            )
    return Verdict(
        True,
        f"turns chain ({setup}): {TURNS} tool turns, with and without text before the call, "
        "extend the previous prompt token for token",
    )


def write_record(line: str, path: Path | None = None) -> None:
    try:
        (path or RECORD).write_text(line + "\n")
    except OSError:
        pass  # the start-up log still has the line


def read_record(path: Path | None) -> str:
    try:
        return path.read_text().strip() if path else ""
    except OSError:
        return ""
