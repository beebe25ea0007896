"""Trial folders bounded on disk: the newest TRIALS_KEEP finished ones, within TRIALS_MAX_GB, are kept.

Harbor writes one folder per rollout under TRIALS_DIR (`<trials_dir>/<trial_name>`: the agent's logs, the
verifier's output, result.json), and nothing removed them: measured, 54 folders and 20 MB after a short CPU
run, so thousands by the morning of a night's run. `Retention.prune` runs as each rollout finishes (on a
thread of its own: the rollout's answer does not wait for it) and removes the oldest finished folders of
this stack past either bound.

Only this stack's folders (trial names start with its sandbox prefix, sandboxes.py) and only finished ones:
Harbor writes `result.json` in `Trial._finalize` (harbor 0.25.0, trial/trial.py), after the sandbox is
stopped, so a folder without it belongs to a rollout still running, or to one an env server that was
killed never finished (leftovers.py removes those at start). The newest finished folder is always kept.

TRIALS_MAX_GB is a promise that the folder may grow that large, so the env server refuses to start where the disk
cannot keep it (`space_problem`), and preflight says so first (guards `trials-disk`). What finished folders already
hold counts toward the cap (retention removes the oldest to stay within it). Folders of rollouts in flight are
outside the cap: MAX_INFLIGHT_ROLLOUTS of them, a few MB each, which the check leaves to the disk's margin.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path

from stack import space
from stack.env import EnvError
from stack.space import GB, folder_bytes, space_problem

RESULT = "result.json"


def trial_folders(trials_dir: Path, prefix: str) -> tuple[list[tuple[float, str]], list[str]]:
    """(finished: (result.json's mtime, name) oldest first, unfinished names) of this stack's trial folders."""
    finished, unfinished = [], []
    try:
        entries = list(os.scandir(trials_dir))
    except FileNotFoundError:
        return [], []
    for entry in entries:
        if not entry.name.startswith(prefix + "-") or not entry.is_dir(follow_symlinks=False):
            continue
        try:
            finished.append((os.stat(os.path.join(entry.path, RESULT)).st_mtime, entry.name))
        except FileNotFoundError:
            unfinished.append(entry.name)
    finished.sort()
    return finished, unfinished


class Retention:
    def __init__(self, trials_dir: str, prefix: str, keep: int, max_gb: float, say: Callable[[str], None]) -> None:
        self.trials_dir = Path(trials_dir)
        self.prefix = prefix
        self.keep = keep
        self.max_bytes = int(max_gb * GB)
        self.say = say
        self.removed = 0
        self.freed_bytes = 0
        self._sizes: dict[str, int] = {}  # a finished folder no longer grows: measured once
        self._lock = threading.Lock()

    def describe(self) -> str:
        size = f"{self.max_bytes / GB:g} GB" if self.max_bytes else "no size cap"
        return (
            f"trials    keeping the newest {self.keep} finished trial folders (TRIALS_KEEP) within {size} "
            f"(TRIALS_MAX_GB) in {self.trials_dir}; older ones are removed as rollouts finish"
        )

    def prune_soon(self) -> None:
        """After a rollout: prune on a thread of its own; a prune already running covers this one."""
        threading.Thread(target=self.prune, name="trial-retention", daemon=True).start()

    def prune(self) -> int:
        """Remove the oldest finished folders past the bounds; returns how many. Never raises."""
        if not self._lock.acquire(blocking=False):
            return 0
        try:
            return self._prune()
        except Exception as exc:  # noqa: BLE001 - a full or odd disk must never fail a rollout
            self.say(f"trials    retention skipped: {type(exc).__name__}: {exc}")
            return 0
        finally:
            self._lock.release()

    def _prune(self) -> int:
        finished, _ = trial_folders(self.trials_dir, self.prefix)
        names = {name for _, name in finished}
        self._sizes = {n: b for n, b in self._sizes.items() if n in names}
        for _, name in finished:
            if name not in self._sizes:
                self._sizes[name] = folder_bytes(str(self.trials_dir / name))
        total = sum(self._sizes.values())
        removed = 0
        while len(finished) > 1 and (len(finished) > self.keep or (self.max_bytes and total > self.max_bytes)):
            _, name = finished.pop(0)
            shutil.rmtree(self.trials_dir / name, ignore_errors=True)
            size = self._sizes.pop(name, 0)
            total -= size
            removed += 1
            self.freed_bytes += size
        if removed and not self.removed:
            self.say(
                f"trials    retention reached: removing the oldest finished trial folders from now on "
                f"({removed} now, {len(finished)} kept, {total / 2**20:.0f} MB)"
            )
        self.removed += removed
        return removed

    @property
    def held_bytes(self) -> int:
        """What this stack's finished folders hold, as the last prune measured it."""
        return sum(self._sizes.values())


def begin(
    trials_dir: str,
    prefix: str,
    keep: int,
    max_gb: float,
    say: Callable[[str], None],
    free_bytes: Callable[[str], int] = space.free_bytes_at,
) -> Retention:
    """At the env server's start: prune to the bounds, then refuse (EnvError, one line) where the disk cannot
    keep what TRIALS_MAX_GB promises; the retention to run as rollouts finish."""
    retention = Retention(trials_dir, prefix, keep, max_gb, say)
    retention.prune()
    if problem := space_problem(trials_dir, max_gb, free_bytes(trials_dir), retention.held_bytes):
        raise EnvError(problem)
    return retention
