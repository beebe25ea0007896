"""Fault switches: make the mock misbehave the ways a misconfigured engine does, for tests.

Set at start from the environment (MOCK_FAULTS="no_token_ids,raw_logprobs", MOCK_SLOW_S, MOCK_ERROR_STATUS,
MOCK_ERROR_RATE) or at run time through `POST /mock/faults` with the same fields as JSON.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field

FAULTS = {
    "no_token_ids": "choices carry no token_ids",
    "no_prompt_token_ids": "no top-level (chat) or per-choice (completions) prompt_token_ids",
    "logprobs_without_ids": "logprobs with string tokens and no token ids at all (a plain OpenAI endpoint)",
    "raw_logprobs": "pre-temperature logprobs (vLLM without --logprobs-mode processed_logprobs)",
    "token_strings": "ids present but logprob tokens are text, not token_id:N "
    "(vLLM without --return-tokens-as-token-ids)",
    "fork": "every turn's prompt re-renders the conversation's start differently (as a template that renders "
    "history by turn count): no turn extends the last, every multi-turn rollout forks",
    "weights_not_served": "weight updates are acknowledged and counted (the served version moves) but the old "
    "weights keep serving: the learning gate's control (tests/learning), which no handshake can see",
    "hold_pause": "`POST /pause` (a weight push's first call) holds its answer until the fault is switched off, at "
    "most HOLD_PAUSE_S: a push that stays open, so a test can kill the engine during one (tests/faults)",
    "turn_end_other": "a reply the model samples itself ends on the model's other stop token (<|endoftext|>) "
    "where it would close the turn with the chat template's (<|im_end|>): the turn ends there when the stop set "
    "(TURN_END_TOKENS) holds that token, and the rollout forks; otherwise the token is content and the turn ends "
    "on the template's token right after it",
}


# The longest `hold_pause` holds a push open: past any test's wait, below TRL's own 300 s on pause.
HOLD_PAUSE_S = 240.0


class FaultError(ValueError):
    pass


@dataclass
class Faults:
    active: set[str] = field(default_factory=set)
    slow_s: float = 0.0
    error_status: int = 0
    error_rate: float = 1.0

    def __contains__(self, name: str) -> bool:
        return name in self.active

    def should_error(self) -> bool:
        return bool(self.error_status) and random.random() < self.error_rate

    def to_json(self) -> dict:
        doc = asdict(self)
        doc["active"] = sorted(self.active)
        doc["known"] = FAULTS
        return doc


def rerender_history(messages: list) -> list:
    """The `fork` fault: mark the first message with the number of assistant turns so far.

    The change must sit BEFORE the last sampled reply: TRL 1.16's reconciler (`_SampleBuilder`) treats a
    small drift inside the last reply as a realignment, not a fork. A first message that changes with
    every turn makes each turn's prompt diverge from everything held, so every transition forks.
    """
    turns = sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")
    if not turns or not isinstance(messages[0], dict):
        return messages
    first = dict(messages[0])
    marker = f" [history rendered at turn {turns + 1}]"
    content = first.get("content")
    if isinstance(content, list):
        first["content"] = [*content, {"type": "text", "text": marker}]
    else:
        first["content"] = (content if isinstance(content, str) else "") + marker
    return [first, *messages[1:]]


def parse(active, slow_s=0.0, error_status=0, error_rate=1.0) -> Faults:
    if isinstance(active, str):
        active = [a.strip() for a in active.split(",") if a.strip()]
    unknown = sorted(set(active or []) - set(FAULTS))
    if unknown:
        raise FaultError(f"unknown fault {unknown[0]!r}; known faults: {', '.join(FAULTS)}")
    try:
        slow, status, rate = (
            float(slow_s or 0),
            int(error_status or 0),
            float(1.0 if error_rate in (None, "") else error_rate),
        )
    except (TypeError, ValueError):
        raise FaultError("slow_s and error_rate must be numbers, error_status an integer") from None
    if status and not 500 <= status <= 599:
        raise FaultError(f"error_status={status} must be a 5xx status such as 503")
    if slow < 0 or not 0 <= rate <= 1:
        raise FaultError("slow_s must be >= 0 and error_rate between 0 and 1")
    return Faults(set(active or []), slow, status, rate)


def from_env(env) -> Faults:
    return parse(
        env.get("MOCK_FAULTS", ""), env.get("MOCK_SLOW_S"), env.get("MOCK_ERROR_STATUS"), env.get("MOCK_ERROR_RATE")
    )
