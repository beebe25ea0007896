"""Which fields of a model call from a sandbox reach the engine.

Code in a sandbox holds a session key and can put anything in a request body, and OpenEnv forwards
most of it to vLLM. Three things follow, each measured or read in OpenEnv 0.10.0:
  - sampling: with a session policy OpenEnv overwrites temperature/top_p/... (`chat_request.update(
    session.sampling)`), but a field it does not know (`logit_bias`, `seed`, `guided_*`, `min_tokens`,
    vLLM's `extra_args`) changes the distribution the captured logprobs come from;
  - a field vLLM rejects returns a 400 whose message echoes the input, which OpenEnv's compatibility
    layer reads as a "parameter fix" (see `frozen_fixes.py`);
  - a field is simply more surface than an agent needs.
So the body keeps only what an agent's chat call carries (litellm's `openai/` provider, as mini-swe-agent
2.4.6 drives it: model, messages, tools; the rest for other OpenAI-speaking harnesses), and every
sampling knob is removed: the run's policy, which the trainer pins on each session, is the only one.
"""

from __future__ import annotations

from typing import Any

ALLOWED = frozenset(
    {
        "model",
        "messages",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "max_tokens",
        "max_completion_tokens",
        "stream",
        "stream_options",
        "n",
        "user",
    }
)


def clean_chat(body: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """(the body with only ALLOWED fields, the names dropped)."""
    kept = {k: v for k, v in body.items() if k in ALLOWED}
    return kept, sorted(k for k in body if k not in ALLOWED)


# The output-length fields an OpenAI chat call may carry (OpenEnv's clamp also knows `max_output_tokens`,
# which ALLOWED drops).
OUTPUT_FIELDS = ("max_tokens", "max_completion_tokens")


def cap_output(body: dict[str, Any], bound: int | None) -> list[str]:
    """Hold every output-length field to the run's per-turn bound (MAX_OUTPUT_TOKENS, the trainer's
    MAX_COMPLETION_TOKENS), whatever the agent asked; returns the fields changed.

    OpenEnv 0.10.0 clamps too (`capture.server.clamp_output_tokens`), but only values that are `int`: a
    float (`1e9`) or a string (`"100000"`) passed it unchanged, and vLLM's request model coerces both to
    an integer, so one turn could run to the end of the context. Here anything but a whole number in
    1..bound becomes the bound, and a call that names no length gets it."""
    if not bound:
        return []
    changed = []
    for key in OUTPUT_FIELDS:
        if key not in body:
            continue
        value = body[key]
        if type(value) is not int or not 1 <= value <= bound:
            body[key] = bound
            changed.append(key)
    if not any(key in body for key in OUTPUT_FIELDS):
        body["max_tokens"] = bound
    return changed
