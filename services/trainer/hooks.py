"""What the trainer adds to TRL's loop for evaluation and publishing, kept out of train.py.

`check` runs before the warm-up rollout, so a bad EVAL_* or SCREENED_TASKS setting stops the run before
anything is paid for; `install` puts the callbacks in place once the trainer exists, the learning curve's
(trainer/report/curve.py) last of all.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .evaluation.eval_callback import PeriodicEval, status_summary
from .evaluation.evaluate import select_tasks
from .hub.hub_callback import HubPublish
from .report.curve_callback import CurveCallback


def check(s: Any, rows: list[dict], status: Any) -> None:
    if s.evaluation.steps > 0:
        select_tasks(rows, s.evaluation.datasets, s.evaluation.max_tasks)  # raises, naming the fix
    baseline = Path(s.evaluation.baseline) if s.evaluation.baseline else None
    if baseline and baseline.is_file():
        try:
            status.update(eval_baseline=status_summary(json.loads(baseline.read_text())))
        except (ValueError, KeyError) as exc:
            print(f"trainer: EVAL_BASELINE={baseline} is not an evaluation document ({exc}); ignored", flush=True)


def install(trainer: Any, s: Any, runner: Any, rows: list[dict], status: Any) -> None:
    if s.evaluation.steps > 0:
        # First, so the loggers after it see the eval/* keys in the same logs dict (eval_callback.py).
        trainer.callback_handler.callbacks.insert(
            0, PeriodicEval(runner, rows, s, status, worker=trainer.rollout_worker)
        )
    if s.hub.model_id:
        trainer.add_callback(HubPublish(s, status))
    # Last, so the step's row sees every figure the callbacks before it added to `logs` (the eval's first).
    trainer.add_callback(CurveCallback(s.run_dir, status))
