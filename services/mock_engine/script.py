"""Scripted mode for the CPU smoke run: some rollouts follow a known-good action list.

A tiny random model never solves a task, so every rollout would score the same and the group
advantage would be zero: no gradient, nothing to see. With MOCK_SCRIPT_FILE, a conversation whose
first user message contains an entry's `match` follows that entry's `actions` (one `bash` tool call
per assistant turn, then mini-swe-agent's submit command) in a fraction MOCK_SCRIPT_PROB of rollouts,
and is the model's own sample otherwise. Either way the response carries the token ids and the
model's real logprobs of what was returned, so a group gets different rewards and a real gradient.

The choice is per rollout, not per turn: the mock is stateless, so a rollout is "on script" when the
coin (seeded by the request's seed) said so at its first assistant turn, and afterwards exactly when
every earlier assistant turn was the scripted action. A rollout that left the script never rejoins it.

File format: [{"match": "<substring of the first user message>", "actions": ["<bash command>", ...]}]
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

# mini-swe-agent 2.4.6 (config/mini.yaml, the default): the agent finishes when the command's output
# starts with this line.
SUBMIT_COMMAND = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


class ScriptError(ValueError):
    pass


@dataclass(frozen=True)
class Entry:
    match: str
    actions: tuple[str, ...]


def load(path: str | Path) -> list[Entry]:
    try:
        doc = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ScriptError(f"MOCK_SCRIPT_FILE={path} does not exist; point it at a JSON file or unset it") from None
    except ValueError as exc:
        raise ScriptError(f"MOCK_SCRIPT_FILE={path} is not JSON ({exc})") from None
    if not isinstance(doc, list):
        raise ScriptError(f'MOCK_SCRIPT_FILE={path} must be a JSON list of {{"match": ..., "actions": [...]}}')
    entries = []
    for i, item in enumerate(doc):
        match, actions = (item or {}).get("match"), (item or {}).get("actions")
        if not isinstance(match, str) or not match:
            raise ScriptError(f"MOCK_SCRIPT_FILE={path} entry {i}: `match` must be a non-empty string")
        if not isinstance(actions, list) or not all(isinstance(a, str) and a for a in actions):
            raise ScriptError(f"MOCK_SCRIPT_FILE={path} entry {i}: `actions` must be a list of non-empty strings")
        entries.append(Entry(match, tuple(actions)))
    return entries


def parse_prob(raw: str | None) -> float:
    try:
        value = float(raw if raw not in (None, "") else "0.5")
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= 1.0:
        raise ScriptError(f"MOCK_SCRIPT_PROB={raw!r} must be a probability between 0 and 1, e.g. 0.5")
    return value


def _text(content) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def _command_of(message: dict) -> str | None:
    calls = message.get("tool_calls") or []
    if len(calls) != 1 or message.get("content"):
        return None
    fn = calls[0].get("function") or {}
    try:
        args = json.loads(fn.get("arguments") or "")
    except (TypeError, ValueError):
        return None
    return args.get("command") if fn.get("name") == "bash" and isinstance(args, dict) else None


class Script:
    def __init__(self, entries: list[Entry], prob: float, off_script: str = "free"):
        self.entries = entries
        self.prob = prob
        # What an off-script turn of a scripted task is: "free" (the model's unconstrained sample) or
        # "command" (a bash call whose command the model writes: lm.sample_command says why an agent run
        # needs that). MOCK_OFF_SCRIPT; the CPU form sets "command".
        if off_script not in ("free", "command"):
            raise ScriptError(f"MOCK_OFF_SCRIPT={off_script!r}: use free or command")
        self.off_script = off_script

    def matches(self, messages: list[dict]) -> bool:
        """Whether this conversation is one of the scripted tasks (on script or not)."""
        first_user = next((_text(m.get("content")) for m in messages if m.get("role") == "user"), None)
        return first_user is not None and any(e.match in first_user for e in self.entries)

    def next_action(self, messages: list[dict], seed: int | None) -> str | None:
        """The bash command to emit for this turn, or None for the model's own sample."""
        first_user = next((_text(m.get("content")) for m in messages if m.get("role") == "user"), None)
        if first_user is None:
            return None
        entry = next((e for e in self.entries if e.match in first_user), None)
        if entry is None:
            return None
        plan = list(entry.actions) + [SUBMIT_COMMAND]
        done = [m for m in messages if m.get("role") == "assistant"]
        if len(done) >= len(plan):
            return None
        if done:
            on_script = all(_command_of(m) == plan[i] for i, m in enumerate(done))
            return plan[len(done)] if on_script else None
        coin = random.Random(seed).random() if seed is not None else random.random()
        return plan[0] if coin < self.prob else None
