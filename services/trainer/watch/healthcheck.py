"""The trainer's container healthcheck: healthy only while its run is alive and moving.

A trainer that waits forever on refused rollouts is still a running process, so the process being up
proves nothing; its status file does: the trainer rewrites
`<run dir>/status.json` at warm-up, after every logged step and every checkpoint. Healthy means the
state is one of a live run (starting, warming-up, training, finished) AND the file was rewritten within
TRAINER_STALE_S (default 1800 s: no optimizer step for 30 minutes is a stuck run, not a slow one).
Anything else is unhealthy, and the check's one line (shown by `docker inspect` and `scripts/status`)
says which state and why: `waiting-for-rollouts` (the env server refuses rollouts; the trainer backs
off and says why in `reason`), `stopped`, `stopped-by-rule`, `failed`.

The run name is chosen inside the trainer (a fresh name per run), so the trainer announces its status
file's path in a container-local pointer file that this check reads. Stdlib only: it runs every few
seconds beside the trainer.

    python -m trainer.watch.healthcheck      exit 0 healthy, 1 unhealthy
"""

from __future__ import annotations

import calendar
import json
import sys
import time
from pathlib import Path

from stack.env import Env, EnvError
from stack.readers.trainer_health import POINTER_FIELD, STALE_S

LIVE = ("starting", "warming-up", "training", "finished")
POINTER = Path(Env(collect=True).get(POINTER_FIELD))
DEFAULT_STALE_S = STALE_S.default


def announce(status_path: Path, pointer: Path = POINTER) -> None:
    pointer.parent.mkdir(parents=True, exist_ok=True)
    pointer.write_text(str(status_path))


def check(doc: dict, now: float, stale_after_s: float) -> tuple[bool, str]:
    """(healthy, the one line saying why) for one status document."""
    state = doc.get("state")
    step = f"step {doc.get('step')}/{doc.get('max_steps')}"
    if state not in LIVE:
        why = (
            (doc.get("stop_rule") or {}).get("message") or doc.get("error") or doc.get("reason") or "no reason recorded"
        )
        return False, f"trainer {state} at {step}: {why}"
    try:
        age = now - calendar.timegm(time.strptime(str(doc.get("updated_at")), "%Y-%m-%dT%H:%M:%SZ"))
    except ValueError:
        return False, f"trainer status has no readable updated_at ({doc.get('updated_at')!r})"
    if state != "finished" and age > stale_after_s:
        return False, (
            f"trainer {state} at {step} but its status was last written {age:.0f} s ago (> TRAINER_STALE_S="
            f"{stale_after_s:.0f}): no step is finishing; rollouts may be refused (scripts/status says why)"
        )
    return True, f"trainer {state} at {step}, status written {age:.0f} s ago"


def main() -> int:
    try:
        stale_after_s = Env().get(STALE_S)
    except EnvError as exc:
        print(exc)
        return 1
    try:
        path = Path(POINTER.read_text().strip())
    except FileNotFoundError:
        print("trainer has not started a run yet (guards or model loading)")
        return 1
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        print(f"trainer status {path} unreadable: {type(exc).__name__}: {exc}")
        return 1
    healthy, line = check(doc, time.time(), stale_after_s)
    print(line)
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main())
