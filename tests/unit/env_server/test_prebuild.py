"""The prebuild scheduler (env_server/prebuild.py) with a fake build function: Docker is the unreachable
part here. Harbor's own build call and the rollout's wait hook run against real Harbor and a real Docker
daemon in tests/integration/env_server_guards/test_prebuild_in_harbor.py.

What must hold: each distinct image builds once, builds run side by side, a rollout arriving during its
image's build waits for that build (no second one), a failed build is one line and never stops anything,
and SANDBOX=e2b prebuilds nothing."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from pathlib import Path

import pytest

from env_server.prebuild import Prebuilds, Target, begin


def target(key: str, *names: str) -> Target:
    return Target(key=key, names=names or (key,), environment_dir=Path("/nowhere") / key)


class Builds:
    """A build function whose builds end when the test says so; records what it was asked to build."""

    def __init__(self, fail: dict[str, Exception] | None = None):
        self.calls: list[str] = []
        self.started = {k: threading.Event() for k in "abc"}
        self.release = {k: threading.Event() for k in "abc"}
        self.fail = fail or {}

    def __call__(self, t: Target) -> None:
        self.calls.append(t.key)
        self.started[t.key].set()
        assert self.release[t.key].wait(10), f"build {t.key} never released"
        if t.key in self.fail:
            raise self.fail[t.key]


def test_the_first_builds_alone_then_the_rest_side_by_side_once_per_image_and_report_themselves():
    builds, said = Builds(), []
    prebuilds = Prebuilds(builds, said.append, concurrency=2)
    lines = prebuilds.start(
        [target("a", "count-lines", "sum-numbers"), target("b", "write-greeting"), target("c", "fix-typo")]
    )
    assert lines == [
        "prebuild  3 sandbox image(s) building in the background while the engine loads, the first alone, then 2 "
        "at a time: count-lines, sum-numbers (a); write-greeting (b); fix-typo (c)"
    ]
    # The first alone: the layers the others share are then in the cache, not built twice at once.
    assert builds.started["a"].wait(5)
    time.sleep(0.2)  # (short: the done line below rounds a's build time to 0 s)
    assert not builds.started["b"].is_set() and not builds.started["c"].is_set()
    builds.release["a"].set()
    # Then the rest at once, before either is allowed to finish.
    assert builds.started["b"].wait(5) and builds.started["c"].wait(5)
    # Scheduling the same image again (another dataset listing the same environment) builds nothing more.
    prebuilds.start([target("a", "count-lines")])
    builds.release["b"].set()
    builds.release["c"].set()
    prebuilds.join(10)
    assert sorted(builds.calls) == ["a", "b", "c"]
    assert prebuilds.outcomes == {"a": "built", "b": "built", "c": "built"}
    assert sorted(said) == sorted(
        [
            "prebuild  count-lines, sum-numbers (a): building",
            "prebuild  write-greeting (b): building",
            "prebuild  fix-typo (c): building",
            "prebuild  count-lines, sum-numbers (a): done in 0 s",
            "prebuild  write-greeting (b): done in 0 s",
            "prebuild  fix-typo (c): done in 0 s",
        ]
    )


def test_a_rollout_arriving_mid_build_waits_for_that_build_not_a_second_one():
    builds, said = Builds(), []
    prebuilds = Prebuilds(builds, said.append)
    prebuilds.start([target("a")])
    assert builds.started["a"].wait(5)
    assert prebuilds.pending("a")
    waited = {}

    def rollout():
        # The rollout runs on the server's own event loop, not the builder's threads.
        t0 = time.monotonic()
        asyncio.run(prebuilds.wait("a"))
        waited["s"] = time.monotonic() - t0
        waited["outcome"] = prebuilds.outcomes.get("a")

    thread = threading.Thread(target=rollout)
    thread.start()
    time.sleep(0.5)
    assert thread.is_alive(), "the rollout went ahead while its image was still building"
    builds.release["a"].set()
    thread.join(5)
    assert waited["s"] >= 0.5 and waited["outcome"] == "built"
    assert builds.calls == ["a"]
    assert not prebuilds.pending("a")
    # Afterwards, and for an image nobody scheduled, there is nothing to wait for.
    t0 = time.monotonic()
    asyncio.run(prebuilds.wait("a"))
    asyncio.run(prebuilds.wait("never-scheduled"))
    assert time.monotonic() - t0 < 0.5


def test_a_failed_build_is_one_line_and_its_waiter_goes_on_to_build_as_before():
    error = RuntimeError("Docker compose command failed for environment count-lines.\n  Return code: 1.\nStdout: boom")
    builds, said = Builds(fail={"a": error}), []
    prebuilds = Prebuilds(builds, said.append)
    prebuilds.start([target("a", "count-lines"), target("b", "write-greeting")])
    builds.release["a"].set()
    builds.release["b"].set()
    asyncio.run(prebuilds.wait("a"))  # returns, does not raise: the rollout then builds itself
    prebuilds.join(10)
    failed = [line for line in said if "FAILED" in line]
    assert failed == [
        "prebuild  count-lines (a): FAILED after 0 s (RuntimeError: Docker compose command failed for environment "
        "count-lines. Return code: 1. Stdout: boom); its first rollout builds it again"
    ]
    assert prebuilds.outcomes["a"].startswith("failed: RuntimeError") and prebuilds.outcomes["b"] == "built"


def test_the_done_line_says_how_long_the_build_took():
    prebuilds, said = Prebuilds(lambda t: time.sleep(1.2), [].append), []
    prebuilds._say = said.append
    prebuilds.start([target("a", "count-lines")])
    prebuilds.join(10)
    assert said[-1] == "prebuild  count-lines (a): done in 1 s"


def test_a_long_task_list_is_shortened_in_its_label():
    assert target("0123456789abcdef", "t1", "t2", "t3", "t4", "t5").label == "t1, t2, t3 +2 (0123456789ab)"


def test_nothing_is_prebuilt_for_e2b_and_a_broken_plan_never_stops_the_server(tmp_path):
    assert begin("e2b", ["/app/datasets/starter"], "stack-", print) == [
        "prebuild  none: SANDBOX=e2b builds its sandboxes on its own side"
    ]
    # Without Harbor or an unreadable dataset the server still starts; each task's first rollout builds.
    [line] = begin("docker", [str(tmp_path)], "stack-", print)  # a folder with no task in it
    assert re.fullmatch(r"prebuild  not started \(\w+: .*\): each task's first rollout builds its image", line), line


def test_no_more_builds_at_once_than_the_concurrency():
    builds = Builds()
    prebuilds = Prebuilds(builds, [].append, concurrency=1)
    prebuilds.start([target("a"), target("b")])
    first = "a" if builds.started["a"].wait(5) else "b"
    other = "b" if first == "a" else "a"
    assert not builds.started[other].wait(0.5), "a second build started beside the first"
    builds.release[first].set()
    assert builds.started[other].wait(5)
    builds.release[other].set()
    prebuilds.join(10)
    assert prebuilds.outcomes == {"a": "built", "b": "built"}


def test_a_builds_throwaway_trial_folder_is_removed_once_built(monkeypatch, tmp_path):
    """harbor_build hands Harbor a trial folder (a build mounts none) and removes it after the build, built
    or failed: a folder per task image and env-server start was left in /tmp. Harbor's DockerEnvironment is
    replaced by a recorder (no Harbor on the host; the real build runs in test_prebuild_in_harbor.py)."""
    from env_server import prebuild

    monkeypatch.setattr(prebuild.tempfile, "tempdir", str(tmp_path))
    seen = []

    class Recorder:
        def __init__(self, fail: bool):
            self.fail = fail

        async def _run_docker_compose_command(self, args):
            seen.append((args, sorted(p.name for p in tmp_path.iterdir())))
            if self.fail:
                raise RuntimeError("docker compose build failed")

    def environment(environment_dir, name, session_id, env_config, trial_dir=None):
        assert trial_dir is not None and trial_dir.is_dir() and trial_dir.parent == tmp_path
        assert (name, session_id) == ("count-lines", "proj-count-lines-prebuild__env")
        return Recorder(fail=env_config == "broken")

    monkeypatch.setattr(prebuild, "_environment", environment)
    build = prebuild.harbor_build("proj")
    build(Target("k", ("count-lines",), Path("/nowhere")))
    assert len(seen) == 1 and seen[0][0] == ["build"]
    assert len(seen[0][1]) == 1 and seen[0][1][0].startswith("asyncgrpo-prebuild-")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(RuntimeError, match="docker compose build failed"):
        build(Target("k", ("count-lines",), Path("/nowhere"), env_config="broken"))
    assert len(seen) == 2 and list(tmp_path.iterdir()) == []
