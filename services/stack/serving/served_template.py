"""Which chat template the engine serves, and the start-up proof that turns chain under it.

CHAT_TEMPLATE_FIX=auto (default): a think-gated template (Qwen3, Qwen3.5) is served as stack/serving/template_fix.py
derives it from the model's own, written to a file and passed as vLLM's --chat-template; =off serves the
model's own. A --chat-template in ENGINE_EXTRA_ARGS is the operator's and is served as given (and checked).
Then stack/serving/chain.py replays a tool conversation with that template, the tokenizer, CHAT_TEMPLATE_KWARGS,
REASONING_PARSER and TOOL_CALL_PARSER; a configuration that forks is refused in one line
(TURN_CHAIN_CHECK=refuse, default) or served with that line as a warning (=warn).

Runs in the engine image before `vllm serve` (and in the mock engine's, on its own template); the tokenizer
is any object with transformers' apply_chat_template / encode / convert_ids_to_tokens.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from stack import fields
from stack.env import Env, EnvError
from stack.serving import chain, template_fix, turn_end

REFUSE = "refuse"
WARN = "warn"


@dataclass(frozen=True)
class Served:
    path: str | None  # the file to pass as --chat-template; None: the model's own (or the operator's) template
    template_line: str  # which template is served, and the rewrites applied
    verdict: chain.Verdict

    def line(self) -> str:
        return f"{self.template_line}; {self.verdict.line}"


def template_kwargs(raw: str) -> dict:
    try:
        parsed = json.loads(raw) if raw else {}
    except ValueError:
        return {}  # build_command has already refused it with its own line
    return parsed if isinstance(parsed, dict) else {}


def prepare(
    env: Mapping[str, str],
    tokenizer,
    operator_template: bool,
    why_no_tokenizer: str = "",
    out_file: Path = template_fix.TEMPLATE_FILE,
) -> Served:
    """Decide the template, write it when derived, check that turns chain; EnvError (one line) on a fork
    under TURN_CHAIN_CHECK=refuse."""
    read = Env(env)
    fix = read.get(fields.CHAT_TEMPLATE_FIX)
    mode = read.get(fields.TURN_CHAIN_CHECK)
    kwargs = template_kwargs(read.text("CHAT_TEMPLATE_KWARGS"))
    reasoning = read.text("REASONING_PARSER")
    tool_parser = read.text("TOOL_CALL_PARSER") or "hermes"
    if tokenizer is None:
        verdict = chain.Verdict(False, f"turns NOT CHECKED: {why_no_tokenizer or 'no tokenizer'}", False)
        return Served(None, "chat template: the model's own (not read)", verdict)
    own = tokenizer.chat_template
    if not isinstance(own, str) or not own:
        verdict = chain.Verdict(False, "turns NOT CHECKED: the tokenizer has no single chat template", False)
        return Served(None, "chat template: none found", verdict)
    path = None
    if operator_template:
        line = "chat template: ENGINE_EXTRA_ARGS' --chat-template, as given"
    elif fix == template_fix.OFF:
        line = f"chat template: the model's own, as published ({template_fix.SETTING}={template_fix.OFF})"
    else:
        derived = template_fix.derive(own)
        line = derived.line()
        if derived.changed:
            out_file.write_text(derived.template)
            tokenizer.chat_template = derived.template
            path = str(out_file)
    end_id, _why = turn_end.template_turn_end(tokenizer, kwargs)
    verdict = chain.check(tokenizer, tokenizer.chat_template, kwargs, reasoning, tool_parser, end_id)
    if verdict.checked and not verdict.chains and mode == REFUSE:
        raise EnvError(f"{verdict.line}; or set TURN_CHAIN_CHECK=warn to serve it anyway")
    return Served(path, line, verdict)
