"""A docker sandbox stops at once (env_server/sandbox_stop.py), through Harbor 0.25.0's own DockerEnvironment
and a real Docker daemon: `start` brings up the task's `main` service as Harbor runs it (`sh -c "sleep
infinity"`), `stop(delete=True)` is the teardown every rollout ends with. Without the override that
teardown waits out Docker's 10 s grace period; the test fails on the guard being off, not on a timing
margin alone: the container's stop signal is read back from Docker.

The task's image is `FROM python:3.12-slim` (the local base scripts/build-base-images builds): the
`main` service needs a shell, and nothing is pulled.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from docker_cli import docker, require_daemon
from one_sandbox import remove, task_environment

from env_server import sandbox_stop

pytestmark = pytest.mark.docker


@pytest.fixture
def environment(tmp_path):
    require_daemon()
    env = task_environment(tmp_path, "quick-stop")
    yield env
    remove(env)


def stop_signal_and_teardown_s(env) -> tuple[str, float]:
    asyncio.run(env.start(force_build=False))
    listed = docker("ps", "-q", "--filter", f"label=com.docker.compose.project={env.session_id.lower()}")
    [container] = listed.stdout.split()
    signal = docker("inspect", "--format", "{{.Config.StopSignal}}", container).stdout.strip()
    t0 = time.monotonic()
    asyncio.run(env.stop(delete=True))
    return signal, time.monotonic() - t0


def test_a_sandbox_is_torn_down_at_once_with_its_stop_signal_sigkill(environment):
    sandbox_stop.install()
    signal, teardown_s = stop_signal_and_teardown_s(environment)
    assert signal == "SIGKILL"
    # Docker's grace period is 10 s; compose's own down (network removal) takes about 1 s here.
    assert teardown_s < 8, f"teardown took {teardown_s:.1f} s"


def test_the_override_comes_after_harbors_base_file_and_before_the_tasks_own():
    base, task = Path("/h/docker-compose-build.yaml"), Path("/task/environment/docker-compose.yaml")
    resources, mounts = Path("/tmp/resources.yaml"), Path("/tmp/mounts.yaml")
    paths = [resources, base, task, mounts]
    assert sandbox_stop.with_quick_stop(paths, (base,)) == [resources, base, sandbox_stop.OVERRIDE, task, mounts]
    # A layout without Harbor's base file is left as it is.
    assert sandbox_stop.with_quick_stop([task, mounts], (base,)) == [task, mounts]
    # Installing twice wraps Harbor's property once.
    sandbox_stop.install()
    sandbox_stop.install()
    from harbor.environments.docker.docker import DockerEnvironment

    fget = DockerEnvironment.__dict__["_docker_compose_paths"].fget
    assert not hasattr(fget.__wrapped__, "__wrapped__")
