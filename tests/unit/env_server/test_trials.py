"""Trial folders are bounded (trials.py): the newest TRIALS_KEEP finished ones of this stack, within
TRIALS_MAX_GB; unfinished ones (a rollout in flight) and other stacks' are never touched. Real folders."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from env_server.settings import Settings
from env_server.trials import Retention
from stack.env import EnvError

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
