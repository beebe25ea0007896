"""The trainer healthcheck's settings (`python -m trainer.watch.healthcheck`, trainer/watch/healthcheck.py): how
long a run's status may go unrewritten, and where the trainer announces its status file. Preflight checks
TRAINER_STALE_S with this same field."""

from __future__ import annotations

from stack.env import Field

STALE_S = Field(
    "TRAINER_STALE_S",
    "number",
    1800.0,
    "unhealthy when the run's status has not been rewritten for this long (no step finished)",
    fix="set it to a number of seconds above 0",
    above=0,
    # A day: a run that finished no step for longer is the stuck run this check exists to show.
    maximum=86_400,
    fix_above="set it to at most 86400 seconds (a day), e.g. 1800",
)
# Where the trainer announces its status file; a test points it elsewhere.
POINTER_FIELD = Field(
    "TRAINER_STATUS_POINTER", "path", "/tmp/asyncgrpo-trainer-status-path", "the status-path pointer file"
)
FIELDS = (STALE_S, POINTER_FIELD)
