"""TRL's stale-sample rule, modelled, and the `max_staleness` that fits this stack's batch shape.

TRL 1.16.0's rule (read at that tag): the rollout worker stamps a GROUP with the policy version current when the
group's FIRST rollout is dispatched (`_AsyncRolloutLoop._generate_loop`, `RolloutGroup.model_version`); the group's
samples are queued only when its last rollout finishes; the trainer drops a sample as it takes it off the queue when
`current version - stamp > max_staleness` (`RolloutQueueDataset.__iter__`, metric `sample/dropped_stale_total`), and
the version moves by one per optimizer step (weight_sync_steps=1).

Why the default (4) drops so much here: a step holds only what fits in TOKEN_BUDGET (about 2 chained 12-step
rollouts of ~15k tokens in 32k), so one group of 8 spans 4 steps, and the next group was already stamped while this
one was still generating. The samples dropped are each group's slowest-to-consume ones, so the kept advantages of a
group are no longer zero-mean.

The bound used instead (`bound`): TRL's default of 4 steps, scaled by the number of steps a group spans,
ceil(N / samples_per_step). TRL's 4 is a bound for a shape where one step holds whole groups; a group spread over k
steps ages k steps per group consumed, so the same allowance in groups is 4k steps. It is needed because a group
completes only with its slowest rollout while the freed slots already run (and stamp) the next groups, so several
groups can be ahead of one. `simulate` (TRL's rule event by event) at the defaults (8 generations, 8 slots,
2 samples per step, 300 s lognormal rollouts with cv 0.5, 20 s steps) drops 59.8% at 4 and 0.6% at 16.
"""

from __future__ import annotations

import heapq
import math
import random
from dataclasses import dataclass

from stack.sizing.limits import DEFAULT_TURNS, TurnSizes

TRL_DEFAULT = 4


def samples_per_step(
    token_budget: int, sample_tokens: int, per_device_train_batch_size: int, gradient_accumulation_steps: int
) -> int:
    """Samples one optimizer step trains on: TRL packs rows up to `token_budget` tokens (one row per micro-batch
    on one process), or takes `per_device_train_batch_size` samples per micro-batch when the budget is off (<= 0)."""
    per_micro = (
        max(1, token_budget // max(1, sample_tokens)) if token_budget > 0 else max(1, per_device_train_batch_size)
    )
    return per_micro * max(1, gradient_accumulation_steps)


def bound(num_generations: int, per_step: int) -> int:
    """TRL's default, in units of the steps one group spans (module docstring)."""
    return TRL_DEFAULT * math.ceil(num_generations / max(1, per_step))


def max_staleness_for(s, turns: TurnSizes = DEFAULT_TURNS) -> int:
    """MAX_STALENESS when set, else `bound` at the run's batch shape, with a typical (mean-turn) full rollout as the
    sample size."""
    if getattr(s, "max_staleness", None) is not None:
        return s.max_staleness
    per_step = samples_per_step(
        s.token_budget,
        turns.rollout_tokens(s.agent_step_limit, "mean"),
        s.per_device_train_batch_size,
        s.gradient_accumulation_steps,
    )
    return bound(s.num_generations, per_step)


@dataclass(frozen=True)
class SimResult:
    produced: int
    dropped: int
    trained: int
    steps: int
    staleness_max: int  # the largest staleness among trained samples

    @property
    def dropped_frac(self) -> float:
        return self.dropped / self.produced if self.produced else 0.0


def simulate(
    *,
    num_generations: int,
    max_inflight: int,
    per_step: int,
    max_staleness: int,
    rollout_s: float = 300.0,
    rollout_cv: float = 0.5,
    step_s: float = 20.0,
    groups: int = 400,
    seed: int = 0,
) -> SimResult:
    """Event-by-event model of TRL's rule: `max_inflight` rollout slots filled group by group, each rollout lasting
    a lognormal time (mean `rollout_s`, coefficient of variation `rollout_cv`), a group queued when its last rollout
    ends, a trainer that takes samples one at a time, drops the stale ones at once, and spends `step_s` on each
    step of `per_step` kept samples before the version moves. Scoring and weight sync take no time."""
    rng = random.Random(seed)
    sigma = math.sqrt(math.log(1 + rollout_cv**2))
    mu = math.log(rollout_s) - sigma**2 / 2
    events: list[tuple[float, int, str, int]] = []  # (time, tie-break, kind, group)
    tie = 0
    now = 0.0
    version = 0
    stamps: dict[int, int] = {}
    pending: dict[int, int] = {}
    queue: list[int] = []  # group ids, one entry per queued sample
    next_group = dispatched_in_group = 0
    free = max_inflight
    batch = produced = dropped = trained = steps = worst = 0
    trainer_busy_until = 0.0

    def dispatch() -> None:
        nonlocal free, next_group, dispatched_in_group, tie
        while free and next_group < groups:
            if dispatched_in_group == 0:
                stamps[next_group] = version
                pending[next_group] = num_generations
            heapq.heappush(events, (now + rng.lognormvariate(mu, sigma), tie, "done", next_group))
            tie += 1
            free -= 1
            dispatched_in_group += 1
            if dispatched_in_group == num_generations:
                next_group, dispatched_in_group = next_group + 1, 0

    dispatch()
    while events or queue:
        # The trainer consumes whenever it is idle and the queue holds something.
        if queue and trainer_busy_until <= now:
            group = queue.pop(0)
            staleness = version - stamps[group]
            if staleness > max_staleness:
                dropped += 1
                continue
            worst = max(worst, staleness)
            trained += 1
            batch += 1
            if batch == per_step:
                batch = 0
                trainer_busy_until = now + step_s
                heapq.heappush(events, (trainer_busy_until, tie, "step", -1))
                tie += 1
            continue
        if not events:
            break
        now, _, kind, group = heapq.heappop(events)
        if kind == "step":
            version += 1
            steps += 1
            continue
        free += 1
        pending[group] -= 1
        if pending[group] == 0:
            queue.extend([group] * num_generations)
            produced += num_generations
        dispatch()
    return SimResult(produced=produced, dropped=dropped, trained=trained, steps=steps, staleness_max=worst)
