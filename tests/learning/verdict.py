"""The learning gate's verdict, apart from the stack that produces its inputs (so a unit test can read its lines).

Standard library only: tests/learning/test_learning_gate.py calls it on the run's eval documents
(trainer.evaluation.evaluate's `eval.json`, pass@1 with a 95% Wilson interval) and its per-step rewards.
"""

from __future__ import annotations

import math

# Set from measured runs (docs/LEARNING.md): the last three steps' reward reached 0.8-0.9 from a base ~0.25.
REWARD_BAR = 0.7
LAST_STEPS = 3


def pass_at_1(doc: dict) -> tuple[float, float, float]:
    p = doc["pass_at_k"]["1"]
    return p["value"], p["ci_low"], p["ci_high"]


def held_out_failure(baseline: dict, final: dict) -> str | None:
    """Why held-out pass@1 did not rise (None when the final interval lies wholly above the baseline's).

    Two different findings, said apart: the intervals overlap (no rise that 48 attempts can show), or the final
    interval lies wholly BELOW the baseline's (the policy got worse: a broken action format, a wrong push)."""
    b, b_lo, b_hi = pass_at_1(baseline)
    f, f_lo, f_hi = pass_at_1(final)
    if f_lo > b_hi:
        return None
    after = f"held-out pass@1 {f:.3f} [{f_lo:.3f}, {f_hi:.3f}] after training"
    before = f"the baseline {b:.3f} [{b_lo:.3f}, {b_hi:.3f}]"
    if f_hi < b_lo:
        return f"{after} is below {before}: the policy got worse (95% Wilson intervals do not overlap)"
    return f"{after} does not clear {before} (95% Wilson intervals overlap)"


def gate_failures(baseline: dict, final: dict, rewards: dict[int, float]) -> list[str]:
    """Why this run did NOT learn, one line each; empty when it did. The control must get at least one."""
    failures = []
    held_out = held_out_failure(baseline, final)
    if held_out:
        failures.append(held_out)
    last = [rewards[s] for s in sorted(rewards)[-LAST_STEPS:]]
    mean = sum(last) / len(last) if last else math.nan
    if not (len(last) == LAST_STEPS and mean >= REWARD_BAR):
        failures.append(f"mean reward of the last {LAST_STEPS} steps {mean:.3f} < {REWARD_BAR} ({last})")
    return failures
