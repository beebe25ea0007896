"""REPORT_TO's settings, and the one line that refuses a backend that cannot log (wandb without its key). The
trainer refuses with it at start (trainer/__main__.py); preflight says it first, before the engine is paid for.
Where each backend keeps its files: trainer/report/reporting.py."""

from __future__ import annotations

from collections.abc import Mapping

from stack.env import Env, EnvError, Field
from stack.fields import REPORT_TO_CHOICES as CHOICES

PROJECT = "asyncgrpo-harbor"
FIELDS = (
    Field("TRACKIO_SPACE_ID", "text", "", "trackio: also log to this Hugging Face Space; empty: the bucket only"),
    Field("WANDB_API_KEY", "text", "", "Weights & Biases key for REPORT_TO=wandb (the trainer only)", secret=True),
    Field("WANDB_PROJECT", "text", PROJECT, "W&B project the runs are logged under"),
)


def backend(report_to: str) -> str:
    value = (report_to or "none").strip().lower()
    if value not in CHOICES:
        raise EnvError(f"REPORT_TO={report_to!r} is not one of {', '.join(CHOICES)}")
    return value


# Set (to anything) where the key exists but is not passed: preflight checks REPORT_TO=wandb before anything
# is paid for, and the key is a secret of the trainer alone, so compose hands preflight only whether it is set
# (`WANDB_API_KEY_SET: ${WANDB_API_KEY:+set}`).
KEY_SET = "WANDB_API_KEY_SET"
MISSING_KEY = (
    "REPORT_TO=wandb needs WANDB_API_KEY: put it in .env (the trainer alone receives it), "
    "or use REPORT_TO=trackio for a dashboard on the bucket"
)


def missing_key(report_to: str, env: Mapping[str, str]) -> str | None:
    """The one line when the chosen backend cannot log for want of its key, else None."""
    if backend(report_to) != "wandb":
        return None
    read = Env(env)
    if read.get(FIELDS[1]) or read.text(KEY_SET):
        return None
    return MISSING_KEY


def check(report_to: str, env: Mapping[str, str]) -> None:
    """Refuse, before the model loads, a backend that cannot log."""
    line = missing_key(report_to, env)
    if line:
        raise EnvError(line)
