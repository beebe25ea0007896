"""Dropped-reply retries: the forks an agent makes by design, told apart from a re-rendered history.

mini-swe-agent 2.4.6 raises `FormatError` from `model.query()` when a reply holds no valid bash action, before
`DefaultAgent.query` appends the reply (agents/default.py:149-151); `run()` then appends only the format-error
message, role "user" (default.py:100-114). Its next call sends the previous conversation plus that message, without
the reply. TRL 1.16.0's reconciler (`_chain_to_sequences`) sees the new prompt diverge inside the previous prompt's
generation prompt (the "assistant" header gave way to a "user" one) and forks a new row, correctly for training: the
rejected reply is not in the new row's context. But a template that re-renders history forks the same way, and that
is the failure `rollout/fork_frac` and STOP_FORKING_FRAC are for; a policy that writes many format errors early
must not stop a healthy run. So TRL's forks are split here, on token ids alone (no tokenizer, no messages: the
capture hands TRL only ids): a retry is a transition whose new prompt is the previous prompt with messages inserted
before its generation prompt, and which does not carry the previous reply. Everything else stays a fork.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

# The longest generation prompt a retry may drop: the divergence must lie in the previous prompt's last tokens, where
# the generation prompt sits, never in its history. Qwen3 with thinking off drops 6 (`assistant\n<think>\n\n</think>
# \n\n`), ChatML 2, Llama 3 3; real prompts are thousands of tokens, so history changes lie far deeper.
GEN_PROMPT_MAX_TOKENS = 16


def _common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _contains(haystack: Sequence[int], needle: Sequence[int]) -> bool:
    n = len(needle)
    first = needle[0]
    return any(haystack[i] == first and haystack[i : i + n] == needle for i in range(len(haystack) - n + 1))


def is_retry(prev_prompt: Sequence[int], prev_output: Sequence[int], prompt: Sequence[int]) -> bool:
    """Is `prompt` the previous prompt with messages inserted before its generation prompt, the reply dropped?

    - it diverges inside the previous prompt, at most GEN_PROMPT_MAX_TOKENS from its end (a prompt that keeps all of
      the previous one kept the reply's header: the reply was re-rendered, the Qwen3-thinking fork);
    - it ends with the dropped tail (the same generation prompt closes it);
    - what was inserted does not hold the reply's body (its tokens less the last, the turn end): a template whose
      history header differs from its generation prompt (Qwen3 with thinking off: no empty think block in history)
      re-renders the reply inside the generation prompt too. An empty body cannot be looked for and counts as dropped.
    """
    matched = _common_prefix_len(prev_prompt, prompt)
    dropped = len(prev_prompt) - matched
    if not 0 < dropped <= GEN_PROMPT_MAX_TOKENS or len(prompt) < len(prev_prompt):
        return False
    tail = list(prev_prompt[matched:])
    if list(prompt[len(prompt) - dropped :]) != tail:
        return False
    body = list(prev_output[:-1])
    inserted = list(prompt[matched : len(prompt) - dropped])
    return not (body and _contains(inserted, body))


def count(turns: Sequence) -> int:
    """Retries among a rollout's turn transitions (turns: TRL `TurnRecord`s, in order).

    Each is a transition TRL forks: the held row is the previous prompt and reply, and a divergence inside the
    previous prompt is neither a clean append nor a realign (which must start at or after the reply)."""
    return sum(is_retry(a.prompt_ids, a.output_ids, b.prompt_ids) for a, b in zip(turns, turns[1:]))


def split(tally: Mapping, retries: int) -> dict:
    """TRL's tally with its retries moved out of "fork" into "retry": TRL's `rollout/fork_frac` and the stop rule
    then count re-rendered histories only. The rows are TRL's, untouched."""
    return {**tally, "fork": tally["fork"] - retries, "retry": float(retries)}
