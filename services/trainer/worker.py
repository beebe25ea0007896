"""TRL's `HarnessRolloutWorker`, plus the per-step measurements an operator needs to judge a run.

TRL already reports turns (`rollout/turns_mean`), training rows per rollout (`rollout/samples_per_rollout`)
and forks (`rollout/fork_frac`). Added here, under `harbor/`:

- reward mean and spread over scored rollouts, and `zero_spread_frac`: groups whose scored rollouts all
  got the same reward, which carry zero advantage and teach nothing (the all-or-nothing caveat, reward.py);
- `unscorable_frac` (reward None: sandbox or verifier failed), `timeout_frac`, `tool_calls_mean`;
- `forked_rollout_frac`: rollouts with a forked turn transition (TRL's own tally; group_metrics.forked
  says why not rows per rollout). A multi-turn rollout should be ONE chained row.

Metrics ride TRL's own metric queue from the spawned rollout process to the trainer's `log()`.
"""

from __future__ import annotations

import importlib.util

from trl.experimental.async_grpo import async_rollout_worker
from trl.experimental.async_grpo.openenv_harness import HarnessRolloutWorker, _HarnessRolloutLoop

from . import group_metrics, stop


class HarborRolloutLoop(_HarnessRolloutLoop):
    def _push_rollout_metrics(self, *, turns, sequences, completion_ids, tally, loop_exhausted, duration_s):
        # Runs on the worker's event loop for every rollout that produced a result, like TRL's own.
        group_metrics.add_rollout(self._rates, sequences=sequences, loop_exhausted=loop_exhausted, tally=tally)
        super()._push_rollout_metrics(
            turns=turns,
            sequences=sequences,
            completion_ids=completion_ids,
            tally=tally,
            loop_exhausted=loop_exhausted,
            duration_s=duration_s,
        )

    async def _score_group(self, group):
        group_metrics.add_group(self._rates, group.rollout_rewards, group.tool_call_counts)
        return await super()._score_group(group)


class HarborRolloutWorker(HarnessRolloutWorker):
    _loop_cls = HarborRolloutLoop

    def __init__(self, *, cpu_form: bool = False, **kwargs):
        if cpu_form and importlib.util.find_spec("vllm") is None:
            # TRL's worker checks for vllm only as a proxy for "an engine is installed": its traffic is plain
            # HTTP (aiohttp) and this worker's rollouts go through the env server. The CPU form has no vllm
            # (it needs CUDA) and talks to the mock engine, so the check is answered for it, here only.
            async_rollout_worker.is_vllm_available = lambda *a, **k: True
        super().__init__(**kwargs)

    def check_health(self, stale_after_s: float) -> None:
        # TRL calls this every 5 s while the trainer waits for rollouts: the safe point to stop at on
        # SIGTERM (trainer/stop.py), since no weight has changed since the last step.
        stop.raise_if_requested()
        super().check_health(stale_after_s)
