"""Run totals of the samples TRL dropped (too long for token_budget, or stale), logged every step, zero included,
and the window's stale share the STOP_STALE_FRAC rule reads.

Pure (no torch; transformers only inside `DroppedSampleCounter.callback`)."""

from __future__ import annotations

import math
from collections.abc import Mapping

# --- samples TRL drops for exceeding token_budget --------------------------------------------------------------------
#
# TRL 1.16.0 drops them in `TokenBudgetBatcher.__iter__` (trl/experimental/async_grpo/async_grpo_trainer.py): it logs
# "Dropping a rollout sample of N tokens that exceeds token_budget=B" and appends 1.0 to the metric
# `batch/dropped_oversize_total`, which `log()` sums per logging window and then clears. A window without drops logs
# no key at all and nothing keeps a run total, so a silent zero and "never measured" look the same. This counter
# keeps the total and logs it every time, zero included.
DROP_KEYS = {
    "batch/dropped_oversize_total": "batch/dropped_oversize_cumulative",
    "sample/dropped_stale_total": "sample/dropped_stale_cumulative",
}


STALE_FRAC_KEY = "sample/dropped_stale_frac"


def stale_frac(logs: Mapping) -> float | None:
    """Of the samples taken off TRL's queue in this logging window, the share dropped as stale: TRL's per-window
    `sample/dropped_stale_total` over it plus `batch/samples_per_step` (the kept ones; logging_steps=1, so one
    step). None in a window with neither (no step: nothing to say)."""

    def count(key: str) -> float:
        value = logs.get(key)
        return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else 0.0

    dropped, kept = count("sample/dropped_stale_total"), count("batch/samples_per_step")
    return dropped / (dropped + kept) if dropped + kept > 0 else None


class DroppedSampleCounter:
    """Run totals of the samples TRL dropped, fed from the trainer's `logs` dicts."""

    def __init__(self):
        self.totals = {key: 0 for key in DROP_KEYS.values()}

    def observe(self, logs: dict) -> dict:
        """Add one logging window's drops; write the run totals into `logs` (in place) and return them."""
        for window_key, total_key in DROP_KEYS.items():
            value = logs.get(window_key)
            if value is not None and not (isinstance(value, float) and math.isnan(value)):
                self.totals[total_key] += int(round(value))
        logs.update(self.totals)
        frac = stale_frac(logs)
        if frac is not None:
            logs[STALE_FRAC_KEY] = frac
        return dict(self.totals)

    @property
    def oversize(self) -> int:
        return self.totals["batch/dropped_oversize_cumulative"]

    def callback(self):
        """A transformers `TrainerCallback` that feeds this counter from every `on_log`.

        Callbacks run in list order and the Trainer lists its reporters (trackio, tensorboard) BEFORE anything passed
        in `callbacks=`, so the totals would reach them one log late. Put it first instead:
        `trainer.callback_handler.callbacks.insert(0, counter.callback())`; every reporter then sees the totals
        in the same `logs` dict.
        """
        from transformers import TrainerCallback

        counter = self

        class _DroppedSampleCallback(TrainerCallback):
            def on_log(self, args, state, control, logs=None, **kwargs):
                if logs is not None:
                    counter.observe(logs)

        return _DroppedSampleCallback()
