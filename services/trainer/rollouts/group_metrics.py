"""The `harbor/*` per-rollout and per-group measurements, as (numerator, denominator) additions.

TRL's rollout worker (trl 1.16.0, async_rollout_worker.py) keeps `_rates[key] = [num, den]`, ships the pairs
with each batch and logs num/den over the window. These functions say what one rollout and one scored group
add, with no TRL import, so the host unit suite checks the figures the stop rules and status.json read
(trainer/rollouts/worker.py applies them inside TRL's loop).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np


def add(rates: dict, key: str, num: float, den: float = 1.0) -> None:
    rates[key][0] += num
    rates[key][1] += den


def forked(sequences: int, tally: Mapping | None) -> bool:
    """Did this rollout fork: did any turn's prompt fail to extend the tokens held so far?

    TRL's reconciler (`_chain_to_sequences`) counts every forked turn transition in its tally. The number
    of rows it returns is NOT that count: it keeps only rows holding a trained token
    (`_SampleBuilder.has_trained_token`), so a rollout whose every transition forked but whose earlier
    branches train nothing (masked on ingest, zero-filled logprobs, demoted auxiliary calls) comes back
    as ONE row. Counting rows (`sequences > 1`) read 0.0 in the very log where TRL's `fork_frac` read 1.0
    (the mock's `fork` fault; trainer/README.md); the tally cannot miss a fork. Rows stay the fallback
    for a caller without a tally. With a tally they are not consulted: a dropped-reply retry (trainer/rollouts/retries.py)
    also trains two rows, and it is not a fork.
    """
    if not tally:
        return sequences > 1
    return bool(tally.get("fork", 0))


def add_rollout(rates: dict, *, sequences: int, loop_exhausted: bool, tally: Mapping | None = None) -> None:
    add(rates, "harbor/timeout_frac", float(bool(loop_exhausted)))
    # A multi-turn rollout should be ONE chained training row (each turn's prompt extends the last); a
    # rollout with a forked turn transition is the forking tell, over all rollouts with a result.
    add(rates, "harbor/forked_rollout_frac", float(forked(sequences, tally)))
    if tally is not None and tally.get("transitions", 0):
        # Over multi-turn rollouts, as TRL's fork_frac is over their transitions: a retry needs a second turn.
        add(rates, "rollout/retry_frac", float(bool(tally.get("retry", 0))))


def add_group(rates: dict, rewards: list, tool_call_counts: list) -> None:
    scored = np.array([r for r in rewards if r is not None], dtype=float)
    add(rates, "harbor/unscorable_frac", float(len(rewards) - len(scored)), float(len(rewards)))
    add(rates, "harbor/tool_calls_mean", float(sum(tool_call_counts)), float(len(rewards)))
    if len(scored):
        add(rates, "harbor/reward_mean", float(scored.sum()), float(len(scored)))
        add(rates, "harbor/reward_std", float(scored.std()))
        # One scored rollout has no spread to speak of either: it cannot be compared with anything.
        add(rates, "harbor/zero_spread_frac", float(len(scored) < 2 or float(scored.std()) == 0.0))
    else:
        add(rates, "harbor/zero_spread_frac", 1.0)


def scorable_rows(samples: Sequence) -> list:
    """The training rows of scored rollouts only. TRL 1.16.0's `_score_group` gives an unscorable rollout (reward
    None, stored as NaN in `metrics["reward"]`) advantage 0 and still queues its rows: they train nothing but count
    in the loss normaliser, diluting every other row's gradient."""
    return [s for s in samples if math.isfinite(float(s.metrics.get("reward", math.nan)))]


def add_dropped_rows(rates: dict, total: int, kept: int) -> None:
    add(rates, "harbor/unscorable_rows_dropped_frac", float(total - kept), float(total))
