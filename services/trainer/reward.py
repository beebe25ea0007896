"""The training reward: the verifier's own score, plus a small bonus for solving with fewer tool calls.

- The base is what Harbor's verifier wrote: the scalar `reward`, or the component named by REWARD_KEY
  when the suite emits several (`rewards`). It is forwarded, never recomputed here.
- TOOL_EFFICIENCY_BONUS is paid only on a correct answer (base >= 1, full marks), scaled by the share
  of the step budget left unused. A wrong answer earns nothing for being brief, so the bonus cannot
  teach the agent to give up early.
- An unscorable rollout (sandbox or verifier failed, the reward key absent) is `None`, never 0: TRL
  leaves it out of its group's baseline instead of reading it as a failure the agent earned.

The all-or-nothing caveat (README section "Reward: when a suite teaches nothing", services/trainer/README.md):
GRPO learns from differences inside a group. With one pass/fail scalar, a suite the model solves ~16%
of the time gives, at 8 generations, about a quarter of groups all-wrong and a few all-right: groups
with zero spread, zero advantage and no gradient (the `zero_spread_frac` metric). Shape the reward
with components where the suite emits them (tests passed, partial credit; pick one with REWARD_KEY) and
choose tasks the model solves sometimes, not never or always.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

CORRECT_AT = 1.0


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


@dataclass(frozen=True)
class HarborReward:
    """`rollout_reward_fn` for TRL's harness worker. Module-level and frozen: it is pickled to the worker."""

    tool_efficiency_bonus: float
    step_limit: int  # the run's AGENT_STEP_LIMIT (trainer.config); no default of its own to drift

    def bonus(self, base: float | None, tool_calls: int) -> float:
        if base is None or base < CORRECT_AT or self.tool_efficiency_bonus <= 0:
            return 0.0
        unused = max(0.0, 1.0 - tool_calls / max(1, self.step_limit))
        return self.tool_efficiency_bonus * unused

    def __call__(self, outcome: Any) -> float | None:
        base = outcome.env_reward
        if base is None:
            return None
        return float(base) + self.bonus(base, int(outcome.tool_call_count))
