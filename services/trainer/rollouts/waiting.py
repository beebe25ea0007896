"""While the env server refuses rollouts (no verified tunnel URL, engine down, shutting down) or cannot be
reached at all (killed, restarting), the trainer waits with a capped backoff and says why in status.json,
instead of failing each rollout at once: failed at once, a withdrawn tunnel URL makes every rollout an
instant unscorable failure (measured), and the rollout worker spins through the dataset producing nothing.

A refusal is the env server's own answer that it did NOT start the rollout (its message ends in
"rollout not started"): nothing ran and nothing was paid for, so retrying the same rollout is safe. A
rollout that started and then failed is never retried here: it is one unscorable rollout.

Rollouts run in TRL's rollout-worker process (a spawned child) and in the trainer's main process (the
warm-up), so the status file is patched in place (read, set the waiting fields, atomic rename) rather than
through the main process's RunStatus; the main process's next write after a step replaces them.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from stack import atomic

NOT_STARTED = "rollout not started"
WAITING_STATE = "waiting-for-rollouts"
FINAL_STATES = ("stopped", "failed", "finished")
FIRST_DELAY_S = 2.0
MAX_DELAY_S = 30.0
_lock = threading.Lock()  # rollouts wait in several pool threads of one process


def is_refusal(result) -> bool:
    return not getattr(result, "ok", True) and NOT_STARTED in (getattr(result, "error", "") or "")


def _patch_status(path: str, fields: dict) -> None:
    if not path:
        return
    target = Path(path)
    with _lock:
        try:
            doc = json.loads(target.read_text())
        except (OSError, ValueError):
            doc = {}
        if doc.get("state") in FINAL_STATES:
            return  # the run ended meanwhile: never overwrite stopped/failed/finished
        if fields.get("state") == "training" and doc.get("state") != WAITING_STATE:
            return  # only undo our own "waiting"
        doc.update(fields, updated_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        atomic.write_json(target, doc, indent=1, sort_keys=True)


class Backoff:
    """One rollout's wait: 2 s, 4 s ... capped at 30 s, for as long as the env server refuses.

    `sleep` and `clock` are injectable so the schedule is tested without waiting."""

    def __init__(self, status_path: str = "", sleep=time.sleep, clock=time.monotonic, log=print):
        self.status_path = status_path
        self.sleep = sleep
        self.clock = clock
        self.log = log
        self.delay = FIRST_DELAY_S
        self.since: float | None = None
        self.reason = ""

    def wait(self, reason: str) -> float:
        """Record why, then sleep the next delay. Returns the delay slept."""
        now = self.clock()
        if self.since is None:
            self.since = now
        waited = now - self.since
        if reason != self.reason:
            self.log(f"trainer: rollouts refused, waiting (retry in {self.delay:g}s): {reason}", flush=True)
        self.reason = reason
        _patch_status(
            self.status_path,
            {"state": WAITING_STATE, "reason": reason, "waiting_since_s": round(waited, 1)},
        )
        delay = self.delay
        self.sleep(delay)
        self.delay = min(MAX_DELAY_S, self.delay * 2)
        return delay

    def done(self) -> None:
        """The env server took a rollout again: back to training, and say how long it took."""
        if self.since is None:
            return
        waited = self.clock() - self.since
        self.log(f"trainer: rollouts accepted again after {waited:.0f}s of refusals", flush=True)
        _patch_status(self.status_path, {"state": "training", "reason": None, "waiting_since_s": None})
        self.since = None
        self.delay = FIRST_DELAY_S
        self.reason = ""
