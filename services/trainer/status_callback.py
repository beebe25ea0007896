"""The Trainer callback that keeps `status.json` (trainer/status.py) current and prints the per-step line."""

from __future__ import annotations

import time

from transformers import TrainerCallback

from .status import RunStatus, console_line, status_fields


class StatusCallback(TrainerCallback):
    def __init__(self, status: RunStatus):
        self.status = status

    def on_train_begin(self, args, state, control, **kwargs):
        self.status.update(state="training", step=state.global_step)

    def on_step_end(self, args, state, control, **kwargs):
        # When the first optimizer step finished: the smoke test and operators read "time to first
        # step" from here rather than from log timestamps.
        if "first_step_at" not in self.status.doc:
            self.status.update(first_step_at=time.time())

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
