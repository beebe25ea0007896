"""Trial folders are bounded (trials.py): the newest TRIALS_KEEP finished ones of this stack, within
TRIALS_MAX_GB; unfinished ones (a rollout in flight) and other stacks' are never touched. Real folders."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from env_server.trials import Retention
from stack.env import EnvError
from stack.readers.env_server import Settings

PREFIX = "mystack-"


def make(trials: Path, name: str, *, finished: bool, mtime: float, size: int = 10) -> None:
    folder = trials / name
    (folder / "agent").mkdir(parents=True)
    (folder / "agent" / "log.txt").write_bytes(b"x" * size)
    if finished:
        result = folder / "result.json"
        result.write_text("{}")
        os.utime(result, (mtime, mtime))


def names(trials: Path) -> list[str]:
    return sorted(p.name for p in trials.iterdir())


def test_the_oldest_finished_folders_past_the_count_go_and_nothing_else(tmp_path):
    for i in range(5):
        make(tmp_path, f"{PREFIX}-task-{i}", finished=True, mtime=1000 + i)
    make(tmp_path, f"{PREFIX}-task-running", finished=False, mtime=0)
    make(tmp_path, "otherstack--task-0", finished=True, mtime=1)
    said = []
    r = Retention(str(tmp_path), PREFIX, keep=2, max_gb=0, say=said.append)
    assert r.prune() == 3
    assert names(tmp_path) == [f"{PREFIX}-task-3", f"{PREFIX}-task-4", f"{PREFIX}-task-running", "otherstack--task-0"]
    assert said == [
        "trials    retention reached: removing the oldest finished trial folders from now on (3 now, 2 kept, 0 MB)"
    ]
    make(tmp_path, f"{PREFIX}-task-5", finished=True, mtime=2000)
    assert r.prune() == 1 and len(said) == 1  # the first removal is said once
    assert names(tmp_path)[:2] == [f"{PREFIX}-task-4", f"{PREFIX}-task-5"]
    assert (r.removed, r.freed_bytes) == (4, 4 * (10 + 2))


def test_the_size_cap_removes_oldest_first_and_keeps_the_newest_one(tmp_path):
    mb = 1024 * 1024
    for i in range(4):
        make(tmp_path, f"{PREFIX}-t-{i}", finished=True, mtime=1000 + i, size=mb)
    r = Retention(str(tmp_path), PREFIX, keep=100, max_gb=2.5 / 1024, say=lambda _: None)  # 2.5 MB
    assert r.prune() == 2
    assert names(tmp_path) == [f"{PREFIX}-t-2", f"{PREFIX}-t-3"]
    # One folder larger than the whole cap is still kept: the newest trial stays readable.
    r = Retention(str(tmp_path), PREFIX, keep=100, max_gb=0.5 / 1024, say=lambda _: None)
    assert r.prune() == 1 and names(tmp_path) == [f"{PREFIX}-t-3"]


def test_a_missing_trials_dir_is_nothing_to_prune(tmp_path):
    assert Retention(str(tmp_path / "nope"), PREFIX, keep=1, max_gb=1, say=lambda _: None).prune() == 0


def test_the_settings_and_their_bounds():
    s = Settings.from_env({})
    assert (s.trials_keep, s.trials_max_gb) == (1000, 10.0)
    s = Settings.from_env({"TRIALS_KEEP": "50", "TRIALS_MAX_GB": "0"})
    assert (s.trials_keep, s.trials_max_gb) == (50, 0.0)
    with pytest.raises(EnvError) as exc:
        Settings.from_env({"TRIALS_KEEP": "0"})
    assert str(exc.value).startswith("TRIALS_KEEP=") and "0" in str(exc.value)
    with pytest.raises(EnvError) as exc:
        Settings.from_env({"TRIALS_MAX_GB": "-1"})
    assert str(exc.value).startswith("TRIALS_MAX_GB=")


# --- the disk must keep what TRIALS_MAX_GB promises ------------------------------------------------------------
GB = 1024**3


def test_space_problem_counts_what_finished_folders_already_hold():
    from stack.space import space_problem

    assert space_problem("/t", 10, free_bytes=10 * GB) is None
    assert space_problem("/t", 10, free_bytes=4 * GB, held_bytes=6 * GB) is None  # retention keeps them within 10
    assert space_problem("/t", 0, free_bytes=0) is None  # no size cap: nothing promised
    assert space_problem("/t", 10, free_bytes=3 * GB, held_bytes=int(0.5 * GB)) == (
        "TRIALS_MAX_GB=10 lets trial folders grow to 10 GB in /t, but only 3.0 GB is free there, with 0.5 GB already "
        "held by finished trial folders: free space on that disk, lower TRIALS_MAX_GB to at most 3.5, or set "
        "TRIALS_DIR to a folder on a larger disk"
    )
    assert space_problem("/t", 10, free_bytes=0) == (
        "TRIALS_MAX_GB=10 lets trial folders grow to 10 GB in /t, but only 0.0 GB is free there: free space on that "
        "disk, or set TRIALS_DIR to a folder on a larger disk"
    )


def test_the_env_server_refuses_at_start_after_pruning(tmp_path):
    """trials.begin (server.py's start): prune first, so what retention is about to remove is not counted, then the
    disk; a refusal is one EnvError line (server.py prints it as `env-server: cannot start: ...`)."""
    from env_server import trials

    for i in range(3):
        make(tmp_path, f"{PREFIX}-task-{i}", finished=True, mtime=1000 + i, size=1000)
    asked = []

    def free(where):
        asked.append(where)
        return 2 * GB

    with pytest.raises(EnvError) as err:
        trials.begin(str(tmp_path), PREFIX, keep=2, max_gb=3, say=lambda _: None, free_bytes=free)
    assert asked == [str(tmp_path)]
    assert names(tmp_path) == [f"{PREFIX}-task-1", f"{PREFIX}-task-2"]  # pruned to TRIALS_KEEP before measuring
    assert err.value.problems == [
        f"TRIALS_MAX_GB=3 lets trial folders grow to 3 GB in {tmp_path}, but only 2.0 GB is free there, with 0.0 GB "
        "already held by finished trial folders: free space on that disk, lower TRIALS_MAX_GB to at most 2.0, or set "
        "TRIALS_DIR to a folder on a larger disk"
    ]
    retention = trials.begin(str(tmp_path), PREFIX, keep=2, max_gb=2, say=lambda _: None, free_bytes=free)
    assert retention.held_bytes == 2 * 1000 + 2 * len("{}")
