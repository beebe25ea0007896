"""Prebuilt task images against Harbor 0.25.0 and a real Docker daemon (env_server/prebuild.py).

Three tasks, two of which share one environment folder's content: one build per distinct environment
(Harbor's `environment_id`), through Harbor's own `docker compose ... build`; a trial's own build of the
same task afterwards finds every layer in the local cache; and a rollout whose task is still building
waits for that build before Harbor's `start` goes on. The images are `FROM scratch` with a file of random
content, so nothing is pulled from a registry and nothing is cached from an earlier run.
"""

from __future__ import annotations

import asyncio
import secrets
import shutil
import threading
import time
from pathlib import Path

import pytest
from docker_cli import docker, require_daemon

from env_server import prebuild

pytestmark = pytest.mark.docker

STARTER = Path(__file__).resolve().parents[3] / "datasets" / "starter" / "count-lines"


@pytest.fixture
def dataset(tmp_path):
    require_daemon()
    stamp = secrets.token_hex(6)
    shared = f"shared-{stamp}"
    for task, marker, slow in (("alpha", shared, False), ("beta", shared, False), ("gamma", f"gamma-{stamp}", True)):
        root = tmp_path / "tasks" / task
        shutil.copytree(STARTER, root, ignore=shutil.ignore_patterns("environment"))
        config = root / "task.toml"
        config.write_text(config.read_text().replace("asyncgrpo-starter/count-lines", f"prebuild-it/{task}"))
        env = root / "environment"
        env.mkdir()
        (env / "marker").write_text(marker + "\n")
        # gamma's build is slow on purpose (a large file to send and write), for the wait test.
        lines = ["FROM scratch", "COPY marker /marker"]
        if slow:
            (env / "big").write_bytes(secrets.token_bytes(64 * 1024 * 1024))
            lines.append("COPY big /big")
        (env / "Dockerfile").write_text("\n".join(lines) + "\n")
    prefix = f"prebuild-it-{stamp}-"
    yield tmp_path / "tasks", prefix
    listed = docker("images", "--format", "{{.Repository}}", "--filter", f"reference={prefix}*")
    for image in listed.stdout.split():
        docker("rmi", "-f", image)


def test_one_build_per_environment_through_harbor_then_a_trial_build_is_all_cache(dataset):
    from openenv.harbor.tasks import resolve_task_dirs

    folder, prefix = dataset
    targets = prebuild.targets(resolve_task_dirs(str(folder)))
    assert sorted(t.names for t in targets) == [("alpha", "beta"), ("gamma",)]
    said: list[str] = []
    prebuilds = prebuild.Prebuilds(prebuild.harbor_build(prefix), said.append)
    prebuilds.start(targets)
    prebuilds.join(300)
    assert set(prebuilds.outcomes.values()) == {"built"}, said
    assert sorted(line.split(": ")[-1].split(" in ")[0] for line in said if "done in" in line) == ["done", "done"]
    # Harbor's own build for a trial of beta (named as OpenEnv names trials) is served from the cache.
    beta = next(t for t in targets if "beta" in t.names)
    trial = prebuild._environment(
        folder / "beta" / "environment", "beta", f"{prefix}-beta-0a1b2c3d__env", beta.env_config
    )
    assert trial.environment_id == beta.key
    out = asyncio.run(trial._run_docker_compose_command(["build"]))
    text = out.stdout or ""
    assert "CACHED" in text or "Using cache" in text, text[-2000:]


def test_a_rollout_whose_image_is_building_waits_for_that_build(dataset, monkeypatch):
    from harbor.environments.docker.docker import DockerEnvironment
    from openenv.harbor.tasks import resolve_task_dirs

    folder, prefix = dataset
    gamma = next(t for t in prebuild.targets(resolve_task_dirs(str(folder))) if t.names == ("gamma",))
    started: list[float] = []

    async def harbor_start(self, force_build):  # what Harbor's own start would do next: build, then up
        started.append(time.monotonic())

    monkeypatch.setattr(DockerEnvironment, "start", harbor_start)
    said: list[str] = []
    prebuilds = prebuild.Prebuilds(prebuild.harbor_build(prefix), said.append)
    prebuild.install_wait(prebuilds, said.append)
    prebuilds.start([gamma])
    deadline = time.monotonic() + 30
    while not prebuilds.pending(gamma.key) and time.monotonic() < deadline:
        time.sleep(0.05)
    trial = prebuild._environment(gamma.environment_dir, "gamma", f"{prefix}-gamma-0a1b2c3d__env", gamma.env_config)
    done_at: list[float] = []
    thread = threading.Thread(target=lambda: asyncio.run(DockerEnvironment.start(trial, False)))
    thread.start()
    prebuilds.join(300)
    done_at.append(time.monotonic())
    thread.join(30)
    assert prebuilds.outcomes[gamma.key] == "built", said
    assert started and started[0] >= done_at[0] - 1.0, (started, done_at, said)
    assert any(f"rollout {prefix}-gamma-0a1b2c3d__env waited" in line and "(built)" in line for line in said), said
