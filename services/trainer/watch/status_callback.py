"""The Trainer callback that keeps `status.json` (trainer/watch/status.py) current and prints the per-step line."""

from __future__ import annotations

import time

from transformers import TrainerCallback

from .status import RunStatus, console_line, first_step, process_started_at, status_fields


class StatusCallback(TrainerCallback):
    def __init__(self, status: RunStatus):
        self.status = status
        self.started_at = process_started_at()

    def on_train_begin(self, args, state, control, **kwargs):
        self.status.update(state="training", step=state.global_step, started_at=self.started_at)

    def on_step_end(self, args, state, control, **kwargs):
        # When the first optimizer step finished, and how long after this process started: the smoke test
        # and operators read "time to first step" from here rather than from log timestamps.
        if "first_step_at" not in self.status.doc:
            fields, line = first_step(self.started_at, time.time(), state.global_step)
            self.status.update(**fields)
            print(line, flush=True)

    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = logs or {}
        self.status.update(step=state.global_step, **status_fields(logs))
        print(console_line(self.status.doc), flush=True)

    def on_save(self, args, state, control, **kwargs):
        self.status.update(last_checkpoint=f"checkpoint-{state.global_step}", step=state.global_step)

    def on_train_end(self, args, state, control, **kwargs):
        from . import stop

        signal_name = stop.requested()
        if signal_name:
            # Stopped at a step end by SIGTERM: the Trainer saved this step before leaving its loop.
            self.status.update(state="stopped", step=state.global_step, reason=f"{signal_name}: checkpoint saved")
        else:
            self.status.update(state="finished", step=state.global_step)
