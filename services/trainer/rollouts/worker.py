"""TRL's `HarnessRolloutWorker`, plus the per-step measurements an operator needs to judge a run.

TRL already reports turns (`rollout/turns_mean`), training rows per rollout (`rollout/samples_per_rollout`)
and forks (`rollout/fork_frac`). Added here, under `harbor/`:

- reward mean and spread over scored rollouts, and `zero_spread_frac`: groups whose scored rollouts all
  got the same reward, which carry zero advantage and teach nothing (the all-or-nothing caveat, reward.py);
- `unscorable_frac` (reward None: sandbox or verifier failed), `timeout_frac`, `tool_calls_mean`;
- `forked_rollout_frac`: rollouts with a forked turn transition (TRL's own tally; group_metrics.forked
  says why not rows per rollout). A multi-turn rollout should be ONE chained row.
- `rollout/retry_frac`: multi-turn rollouts with a dropped-reply retry (an agent's format-error retry, which TRL
  forks by design). TRL's tally is split first (trainer/rollouts/retries.py), so `rollout/fork_frac`, the forking stop
  rule and `forked_rollout_frac` count re-rendered histories only.

Metrics ride TRL's own metric queue from the spawned rollout process to the trainer's `log()`.

The spawned process is started early, while the warm-up rollout runs (`prestart`), and held at a gate
until TRL starts it after the cold weight sync (rollout_gate.py).
"""

from __future__ import annotations

import importlib.util
import logging
import threading
import time

from trl.experimental.async_grpo import async_rollout_worker, openenv_harness
from trl.experimental.async_grpo.openenv_harness import HarnessRolloutWorker, _HarnessRolloutLoop

from ..watch import stop
from . import group_metrics, retries, reward
from .rollout_gate import StartGate

logger = logging.getLogger("trainer")

_trl_chain_to_sequences = async_rollout_worker._chain_to_sequences


def chain_to_sequences(turns, rollout_id, fork_threshold):
    """TRL's reconciler, rows untouched, its tally with dropped-reply retries split from forks (trainer/rollouts/retries.py)."""
    sequences, tally = _trl_chain_to_sequences(turns, rollout_id, fork_threshold)
    return sequences, retries.split(tally, retries.count(turns))


# TRL 1.16.0's `_HarnessRolloutLoop._run_session` reconciles the turns and hands on only the tally (to
# `_push_rollout_metrics`, where `rollout/fork_frac` is computed): the turns are seen nowhere else, so the split goes
# in where it calls the reconciler. Set on import, which the spawned rollout child does to unpickle its loop.
openenv_harness._chain_to_sequences = chain_to_sequences


class HarborRolloutLoop(_HarnessRolloutLoop):
    def __init__(self, *, start_gate: str | None = None, **kwargs):
        super().__init__(**kwargs)
        self._start_gate = start_gate
        self._spawned_start_index = kwargs.get("dataset_start_index", 0)

    def run(self) -> None:
        # A pre-spawned child (HarborRolloutWorker.prestart): imported and built, it waits for TRL's start.
        if self._start_gate is not None:
            start_index = StartGate(self._start_gate).wait()
            if start_index is None:
                return
            if start_index != self._spawned_start_index:
                # Resume: TRL 1.16.0 sets the position after the child was spawned; position the iterator
                # as its loop's __init__ does from `dataset_start_index`.
                start = start_index % len(self.dataset)
                self._dataset_iter = iter(self.dataset.select(range(start, len(self.dataset))))
        super().run()

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
        # The bonus only where the group's verdicts differ (trainer/rollouts/reward.py), before TRL normalises.
        group.rollout_rewards = reward.group_rewards(group.rollout_rewards)
        group_metrics.add_group(self._rates, group.rollout_rewards, group.tool_call_counts)
        samples = await super()._score_group(group)
        kept = group_metrics.scorable_rows(samples)
        if samples:
            group_metrics.add_dropped_rows(self._rates, len(samples), len(kept))
        return kept


class HarborRolloutWorker(HarnessRolloutWorker):
    _loop_cls = HarborRolloutLoop

    def __init__(self, *, cpu_form: bool = False, engine_watch=None, **kwargs):
        if cpu_form and importlib.util.find_spec("vllm") is None:
            # TRL's worker checks for vllm only as a proxy for "an engine is installed": its traffic is plain
            # HTTP (aiohttp) and this worker's rollouts go through the env server. The CPU form has no vllm
            # (it needs CUDA) and talks to the mock engine, so the check is answered for it, here only.
            async_rollout_worker.is_vllm_available = lambda *a, **k: True
        super().__init__(**kwargs)
        # The main process's (never the child's: TRL pickles only the loop's kwargs), probed in check_health.
        self.engine_watch = engine_watch
        # weights.ServedVersion (set by train.py): what the engine serves after each push.
        self.served = None
        self._gate: StartGate | None = None
        self._prestart: threading.Thread | None = None
        self._prestart_error: BaseException | None = None

    def prestart(self) -> None:
        """Spawn the rollout child now (it imports for tens of seconds on 2 cores) and let it wait at the
        gate; TRL's `start()` at train begin then only opens it (rollout_gate.py says why)."""
        from accelerate.state import PartialState

        # TRL's start() logs through accelerate's logger, which refuses to log before accelerate's state
        # exists; the Trainer creates it only later. The state is a process-wide singleton: same object.
        if not PartialState().is_main_process:
            return  # TRL runs the rollout child on the main process only (and calls start() there only)
        self._gate = StartGate.create()
        self._loop_kwargs["start_gate"] = self._gate.path
        t0 = time.monotonic()

        def spawn() -> None:
            try:
                HarnessRolloutWorker.start(self)  # TRL's spawn and ready-wait, unchanged
                logger.info("rollout child ready %.0f s after its early spawn", time.monotonic() - t0)
            except BaseException as exc:  # noqa: BLE001 - re-raised by start(), where TRL expects it
                self._prestart_error = exc

        self._prestart = threading.Thread(target=spawn, name="rollout-child-prestart", daemon=True)
        self._prestart.start()

    def update_model_version(self, model_version: int) -> None:
        """The version the rollout child stamps new groups with: TRL's, less the pushes the engine did not take.

        TRL 1.16.0 calls this right after the push's `resume()` (`_sync_weight_merged`), where ServedVersion has
        just asked the engine what it serves. A group stamped with TRL's version although the engine still serves
        older weights would count as on-policy; stamped with the served one, TRL's own staleness rule ages it from
        the weights it was really sampled from (and drops it past max_staleness), and the staleness and mismatch
        figures attribute its drift to staleness."""
        behind = self.served.behind if self.served is not None else 0
        super().update_model_version(model_version - behind)

    def start(self) -> None:
        if self._prestart is None:
            return super().start()
        self._prestart.join()
        if self._prestart_error is not None:
            raise self._prestart_error
        # The heartbeat TRL reset at spawn is as old as the wait; the child ticks it once its loop runs.
        self._heartbeat_value.value = time.time()
        self._gate.open(self._loop_kwargs["dataset_start_index"])

    def stop(self) -> None:
        if self._gate is not None:
            self._gate.close()  # a child still at the gate (stopped before training) leaves at once
        try:
            super().stop()
        finally:
            # The child reads the gate until it leaves, and one still being spawned has yet to read it: removed
            # only once neither can happen. With the child gone, the spawn's ready-wait (TRL 1.16.0 start(),
            # which polls the child's liveness every second) ends within a second. Called twice per run (TRL's
            # loop, then train.py): the second finds nothing to remove.
            if self._prestart is not None:
                self._prestart.join(timeout=5)
            if self._gate is not None and not (self._prestart is not None and self._prestart.is_alive()):
                self._gate.remove()
                self._gate = None

    def check_health(self, stale_after_s: float) -> None:
        # TRL calls this every 5 s while the trainer waits for rollouts: the safe point to stop at on
        # SIGTERM (trainer/watch/stop.py), since no weight has changed since the last step. And where an engine that
        # died mid-step shows: the env server refuses every rollout meanwhile, the queue stays empty and nothing
        # in TRL fails, so the engine's /health is asked here (trainer/watch/engine_gone.py).
        stop.raise_if_requested()
        if self.engine_watch is not None:
            self.engine_watch.check()
        super().check_health(stale_after_s)
