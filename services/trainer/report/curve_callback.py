"""The Trainer callback that keeps the run's learning curve (trainer/report/curve.py) current.

Installed last (trainer/hooks.py): the periodic evaluation (inserted first) and every other callback that adds
figures to a step's `logs` dict have run by the time this one reads it, so the eval at step N lands in step N's
row. A curve that cannot be written (disk full) is said once and never stops the run: it is a view of figures
that status.json, the dashboard and the checkpoints also hold.
"""

from __future__ import annotations

from transformers import TrainerCallback

from .curve import Curve, keep_in_history


class CurveCallback(TrainerCallback):
    def __init__(self, run_dir, status):
        self.curve = Curve(run_dir)
        self.status = status
        self.failed = False

    def _write(self) -> None:
        try:
            self.curve.write()
        except OSError as exc:
            if not self.failed:
                print(
                    f"trainer: cannot write the learning curve in {self.curve.run_dir} ({exc}); training goes on",
                    flush=True,
                )
            self.failed = True

    def on_train_begin(self, args, state, control, **kwargs):
        # Runs after the Trainer loaded a resumed checkpoint's state (transformers 5.17.0 _init_training_state).
        self.curve.last_step = state.max_steps
        self.curve.restart(state.log_history, self.status.doc.get("eval_baseline"))
        self._write()

    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = logs or {}
        keep_in_history(state.log_history, state.global_step, logs)
        if self.curve.log(state.global_step, logs):
            self._write()
