"""A chat template that does not fork, derived at start from the model's own (CHAT_TEMPLATE_FIX=auto).

The families that gate thinking (Qwen3, Qwen3.5) render an assistant turn's think block only after the
last user message (`loop.index0 > ns.last_query_index`), and Qwen3 renders an EMPTY think block only on the
last turn (`loop.last or (not loop.last and reasoning_content)`): an empty think block the model wrote, or
the one a thinking-off generation prompt wrote, is gone from the next prompt. Within one mini-swe-agent rollout the
observations are `role: tool`, so the gate holds until the agent's history outgrows it; and a think block
the generation prompt opened (or, with enable_thinking false, closed empty) comes back different in the
next prompt, and the rollout forks (stack/serving/chain.py replays it). Qwen3 also writes its own "\\n" before a
call after any text, where vLLM's hermes parser already kept the model's "\\n" in `content`.

Each rewrite below is named, matches the published template's own expression, and is logged; a template
none of them matches is served as is (the chain check then decides). What the model sees differently: every
history turn keeps its think block (its reasoning, or the empty block thinking-off wrote), exactly the
tokens it sampled. That is right for training: the sample trained is then the one sequence the engine
generated, with the logprobs it was generated with; the published gate drops past reasoning to save
context at chat time, which for a rollout means training on a prompt the model never saw.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

SETTING = "CHAT_TEMPLATE_FIX"
AUTO = "auto"
OFF = "off"
# Where the launcher writes the derived template for vLLM's --chat-template (the container's own /tmp).
TEMPLATE_FILE = Path(tempfile.gettempdir()) / "asyncgrpo-engine-chat-template.jinja"


@dataclass(frozen=True)
class Rewrite:
    name: str
    why: str
    pattern: str  # a regular expression matching the published template's own expression
    replacement: str


REWRITES = (
    Rewrite(
        "history-keeps-reasoning",
        "render every assistant turn's think block, not only those after the last user message",
        r"loop\.index0\s*>\s*ns\.last_query_index",
        "loop.index0 > -1",
    ),
    Rewrite(
        "think-block-where-one-was-written",
        "render a history turn's think block wherever one was written, empty ones included: by the model (its "
        "content holds `</think>`) or by the generation prompt (enable_thinking false closes an empty one)",
        r"loop\.last\s+or\s+\(\s*not\s+loop\.last\s+and\s+reasoning_content\s*\)",
        "loop.last or reasoning_content or '</think>' in (message.content or '') "
        "or (enable_thinking is defined and enable_thinking is false)",
    ),
    Rewrite(
        "no-doubled-newline-before-call",
        "no separator before the first call when the content the parser kept already ends with a newline",
        r"\(\s*loop\.first\s+and\s+content\s*\)\s+or\s+\(\s*not\s+loop\.first\s*\)",
        "(loop.first and content and not content.endswith('\\n')) or (not loop.first)",
    ),
)


@dataclass(frozen=True)
class Derived:
    template: str  # the template to serve (the model's own when nothing applied)
    applied: tuple[str, ...]  # names of the rewrites that matched

    @property
    def changed(self) -> bool:
        return bool(self.applied)

    def line(self, source: str = "the model's chat template") -> str:
        if not self.applied:
            return f"chat template: {source}, as published ({SETTING}: no rewrite applies)"
        return (
            f"chat template: {source} with {', '.join(self.applied)} ({SETTING}={AUTO}: history keeps its "
            f"reasoning, so each turn's prompt extends the last; {SETTING}={OFF} serves it as published)"
        )


def gates_thinking(template: str) -> bool:
    """Whether the template is one of the think-gated families this module rewrites."""
    return "</think>" in template and re.search(REWRITES[0].pattern, template) is not None


def derive(template: str) -> Derived:
    """The model's template with every rewrite that matches it applied (none unless it gates thinking)."""
    if not gates_thinking(template):
        return Derived(template, ())
    out, applied = template, []
    for rewrite in REWRITES:
        out, count = re.subn(rewrite.pattern, lambda _m, r=rewrite.replacement: r, out)
        if count:
            applied.append(rewrite.name)
    return Derived(out, tuple(applied))
