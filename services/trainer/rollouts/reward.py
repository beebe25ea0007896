"""The training reward: the verifier's own score, plus a small bonus for solving with fewer tool calls.

- The base is what Harbor's verifier wrote: the scalar `reward`, or the component named by REWARD_KEY
  when the suite emits several (`rewards`). It is forwarded, never recomputed here.
- TOOL_EFFICIENCY_BONUS is paid only on a PASSED rollout, scaled by the share of the step budget left unused, and
  only in a group whose scored rollouts did not all pass or all fail (`group_rewards`). Why the group gate: TRL
  divides each group's advantages by the group's standard deviation, which removes the bonus's scale. In a group
  where every rollout passed, a 0.1 bonus alone is the whole spread, and (TRL 1.16.0's `_score_group` formula) tool
  calls 3..29 gave advantages +1.22 .. -2.04: correct solutions that verified their work were pushed down as hard
  as wrong answers elsewhere. In a mixed group every passed rollout still ranks above every failed one (the bonus
  is below the pass/fail gap), so the bonus only orders the solutions.
- "Passed" is the suite's pass/fail verdict (`passed`): a `passed` component when the suite writes one, else the
  main scalar `reward` at full marks; never the REWARD_KEY component, which may be partial credit on another scale
  (the old `base >= 1.0` gate paid on a partial-credit key whenever it happened to reach 1).
- An unscorable rollout (sandbox or verifier failed, the reward key absent, NaN or inf, no captured turn) is
  `None`, never 0: it leaves its group's baseline and trains no row (trainer/rollouts/worker.py).

The all-or-nothing caveat (README section "Reward: when a suite teaches nothing", services/trainer/README.md):
GRPO learns from differences inside a group. With one pass/fail scalar, a suite the model solves ~16%
of the time gives, at 8 generations, about a quarter of groups all-wrong and a few all-right: groups
with zero spread, zero advantage and no gradient (the `zero_spread_frac` metric). Shape the reward
with components where the suite emits them (tests passed, partial credit; pick one with REWARD_KEY) and
choose tasks the model solves sometimes, not never or always.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

CORRECT_AT = (
    1.0  # what trainer/evaluation/evaluate.py counts as solved (pass@k); training's bonus reads `passed` instead
)
PASSED_KEY = "passed"  # a suite's explicit pass/fail component, when it writes one


class RewardKeyMissing(LookupError):
    pass


def base_reward(reward: float | None, rewards: dict[str, float], reward_key: str = "") -> float | None:
    """The verifier's score for this rollout, or None when there is none to read."""
    if reward_key:
        if reward_key not in rewards:
            if rewards:
                raise RewardKeyMissing(
                    f"REWARD_KEY={reward_key} is not among this suite's rewards {sorted(rewards)}: set one of them, "
                    "or leave REWARD_KEY empty for the main score"
                )
            return None
        value = rewards[reward_key]
    else:
        value = reward
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def passed(reward: float | None, rewards: Mapping[str, float]) -> bool | None:
    """The suite's pass/fail verdict: its `passed` component, else its main scalar `reward`; a verdict is 1 (pass)
    or 0 (fail). None when there is no verdict to read (no such value, or one that is not 0 or 1)."""
    value = rewards.get(PASSED_KEY, reward) if isinstance(rewards, Mapping) else reward
    if value is None:
        return None
    value = float(value)
    return {1.0: True, 0.0: False}.get(value)


# The verdict travels from the session's verify() to the reward function on the same thread: TRL 1.16.0's
# `_HarnessRolloutLoop._run_session` (openenv_harness.py, read at that tag) calls `session.verify(completion)` and then
# `rollout_reward_fn(outcome)` back to back on one pool thread, and its outcome carries only `float(env_reward)`.
_verdict = threading.local()


def note_verdict(verdict: bool | None) -> None:
    _verdict.value = verdict


def take_verdict() -> bool | None:
    verdict, _verdict.value = getattr(_verdict, "value", None), None
    return verdict


class RolloutReward(float):
    """base + bonus as the float TRL stores, carrying its parts for `group_rewards` (TRL keeps the object as is in
    `RolloutGroup.rollout_rewards` and turns it into a plain float in `_score_group`)."""

    base: float
    bonus: float
    passed: bool | None

    def __new__(cls, base: float, bonus: float = 0.0, passed: bool | None = None):
        value = super().__new__(cls, base + bonus)
        value.base, value.bonus, value.passed = float(base), float(bonus), passed
        return value


@dataclass(frozen=True)
class HarborReward:
    """`rollout_reward_fn` for TRL's harness worker. Module-level and frozen: it is pickled to the worker."""

    tool_efficiency_bonus: float
    step_limit: int  # the run's AGENT_STEP_LIMIT (stack.readers.trainer); no default of its own to drift

    def bonus(self, verdict: bool | None, tool_calls: int) -> float:
        if verdict is not True or self.tool_efficiency_bonus <= 0:
            return 0.0
        unused = max(0.0, 1.0 - tool_calls / max(1, self.step_limit))
        return self.tool_efficiency_bonus * unused

    def __call__(self, outcome: Any) -> RolloutReward | None:
        verdict = take_verdict()
        base = outcome.env_reward
        if base is None or not math.isfinite(float(base)):
            return None
        return RolloutReward(float(base), self.bonus(verdict, int(outcome.tool_call_count)), verdict)


def group_rewards(rewards: Sequence[float | None]) -> list[float | None]:
    """The rewards TRL normalises for one group: the bonus kept only where the group's scored rollouts include both
    a passed and a failed one (module docstring); None stays None."""
    verdicts = {getattr(r, "passed", None) for r in rewards if r is not None}
    mixed = True in verdicts and False in verdicts
    out: list[float | None] = []
    for r in rewards:
        if r is None:
            out.append(None)
        elif isinstance(r, RolloutReward):
            out.append(float(r) if mixed else r.base)
        else:
            out.append(float(r))
    return out
