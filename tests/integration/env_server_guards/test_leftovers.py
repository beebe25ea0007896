"""A starting env server removes what killed rollouts of ITS stack left besides their sandboxes: the task
image tag each rollout's build made, and each unfinished trial folder (env_server/leftovers.py).

Real Docker and Harbor 0.25.0: the images are built by Harbor's own `docker compose ... build`, for a
prebuild (`<stack>--<task>-prebuild__env`, kept: it holds the layer cache) and for a trial named as OpenEnv
names it (`<stack>--<task>-<hex8>__env`), for this stack and for a stack whose name extends this one's.
The image is `FROM scratch` with a file of random content: nothing is pulled, nothing cached from before.
"""

from __future__ import annotations

import asyncio
import secrets
import shutil
from pathlib import Path

import pytest
from docker_cli import docker, require_daemon

from env_server import leftovers, prebuild
from env_server.sandboxes import trial_prefix

pytestmark = pytest.mark.docker

STARTER = Path(__file__).resolve().parents[3] / "datasets" / "starter" / "count-lines"


def tags(prefix: str) -> list[str]:
    listed = docker("images", "--format", "{{.Repository}}:{{.Tag}}", "--filter", f"reference={prefix}*")
    return sorted(listed.stdout.split())


@pytest.fixture
def task(tmp_path):
    require_daemon()
    root = tmp_path / "tasks" / "alpha"
    shutil.copytree(STARTER, root, ignore=shutil.ignore_patterns("environment"))
    env = root / "environment"
    env.mkdir()
    (env / "marker").write_text(secrets.token_hex(8) + "\n")
    (env / "Dockerfile").write_text("FROM scratch\nCOPY marker /marker\n")
    stack = f"leftovers-it-{secrets.token_hex(3)}"
    mine, theirs = trial_prefix(stack), trial_prefix(stack + "-other")
    yield root, mine, theirs
    for image in tags(mine[:-1]):
        docker("rmi", "-f", image)


def build(task_dir: Path, session: str) -> None:
    from harbor.models.task.task import Task

    config = Task(task_dir).config.environment
    asyncio.run(
        prebuild._environment(task_dir / "environment", "alpha", session, config)._run_docker_compose_command(["build"])
    )


def test_a_killed_rollouts_image_tag_and_trial_folder_go_and_nothing_else(task, tmp_path):
    task_dir, mine, theirs = task
    build(task_dir, f"{mine}-alpha-prebuild__env")
    build(task_dir, f"{mine}-alpha-0a1b2c3d__env")  # a rollout's own build, left by a kill
    build(task_dir, f"{theirs}-alpha-0a1b2c3d__env")
    rollout_tag = f"{mine}-alpha-0a1b2c3d__env-main:latest"
    kept = [f"{mine}-alpha-prebuild__env-main:latest", f"{theirs}-alpha-0a1b2c3d__env-main:latest"]
    # The names Harbor's build gives (compose's `<project>-<service>`): what leftovers.py relies on.
    assert tags(mine[:-1]) == sorted([rollout_tag, *kept])

    trials = tmp_path / "trials"
    for name, finished in (
        (f"{mine}-alpha-11111111", True),
        (f"{mine}-alpha-0a1b2c3d", False),
        (f"{theirs}-alpha-0a1b2c3d", False),
    ):
        (trials / name / "agent").mkdir(parents=True)
        if finished:
            (trials / name / "result.json").write_text("{}")

    line = leftovers.reap("docker", mine, str(trials))
    print(f"\n{line}")
    assert line == (
        f"reaped    1 unfinished trial folder(s), 1 rollout image tag(s) that killed rollouts of stack '{mine}' "
        "left behind"
    )
    assert tags(mine[:-1]) == sorted(kept)
    assert sorted(p.name for p in trials.iterdir()) == [f"{mine}-alpha-11111111", f"{theirs}-alpha-0a1b2c3d"]
    assert leftovers.reap("docker", mine, str(trials)) == (
        f"reaped    0 unfinished trial folder(s), 0 rollout image tag(s) that killed rollouts of stack '{mine}' "
        "left behind"
    )
