"""Where the trainer's metrics go (REPORT_TO) and where each backend keeps its files.

- trackio (default) and tensorboard write under `<bucket>/dashboards/`, so the run's dashboard outlives
  the host and the `dashboard` compose profile (trainer.report.dashboard) can serve it from the bucket.
  `TRACKIO_SPACE_ID`, when set, also sends trackio's logs to that Hugging Face Space.
- wandb sends them to Weights & Biases; its key, `WANDB_API_KEY`, is a secret of the trainer alone.
  Its local files go under the bucket too (`WANDB_DIR`), so an offline run can be synced later.
- none logs nowhere but the console and status.json.

Stdlib only: the dashboard service and the trainer's early checks import it before torch.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from pathlib import Path

from stack.env import Env
from stack.readers.reporting import FIELDS, backend


def log_dirs(dashboard_dir: Path, run_name: str) -> dict[str, str]:
    return {
        "TRACKIO_DIR": str(dashboard_dir / "trackio"),
        "TENSORBOARD_LOGGING_DIR": str(dashboard_dir / "tensorboard" / run_name),
        "WANDB_DIR": str(dashboard_dir / "wandb"),
    }


def prepare(report_to: str, dashboard_dir: Path, run_name: str, env: MutableMapping[str, str] | None = None):
    """(TrainingArguments' `report_to` list, extra TrainingArguments fields). Sets each backend's folder
    in `env` first: trackio reads its folder once, at import, so this runs before anything imports it."""
    env = os.environ if env is None else env
    for name, value in log_dirs(dashboard_dir, run_name).items():
        env.setdefault(name, value)
    env.setdefault("WANDB_PROJECT", FIELDS[2].default)
    chosen = backend(report_to)
    if chosen == "none":
        return [], {}
    extra = {}
    if chosen == "trackio":
        # transformers 5.17 passes `trackio_space_id` to trackio.init; None keeps the logs local only.
        extra["trackio_space_id"] = Env(env).get(FIELDS[0]) or None
    return [chosen], extra
