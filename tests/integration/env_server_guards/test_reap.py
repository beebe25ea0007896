"""A starting env server removes the sandboxes an earlier run of ITS stack left, and nobody else's.

Real Docker: the "sandboxes" are containers and a network labelled the way Harbor's docker environment
labels a trial's compose project (`com.docker.compose.project=<trial>__env`, trial = OpenEnv's
`<prefix>-<task>-<hex8>`), one for this stack and one for a stack whose name extends this one's.
"""

from __future__ import annotations

import os
import secrets

import pytest
from docker_cli import docker

from env_server.sandboxes import PROJECT_LABEL, reap, trial_prefix

IMAGE = os.environ.get("ENV_SERVER_IMAGE", "asyncgrpo-harbor/env-server:local")


@pytest.fixture
def leftovers():
    stack = f"reap-it-{secrets.token_hex(3)}"
    mine, theirs = trial_prefix(stack), trial_prefix(stack + "-other")
    made = {}
    for who, prefix in (("mine", mine), ("theirs", theirs)):
        project = f"{prefix}-write-greeting-{secrets.token_hex(4)}__env"
        run = docker(
            "run",
            "-d",
            "--label",
            f"{PROJECT_LABEL}={project}",
            "--label",
            "asyncgrpo-harbor.test=1",
            IMAGE,
            "sleep",
            "300",
        )
        assert run.returncode == 0, run.stderr
        net = docker("network", "create", "--label", f"{PROJECT_LABEL}={project}", f"{project[:40]}-net")
        assert net.returncode == 0, net.stderr
        made[who] = (run.stdout.strip(), net.stdout.strip())
    yield mine, made
    for container, network in made.values():
        docker("rm", "-f", container)
        docker("network", "rm", network)


def test_reap_removes_only_this_stacks_sandboxes(leftovers):
    prefix, made = leftovers
    line = reap("docker", prefix)
    print(f"\n{line}")
    assert line == f"reaped    1 docker sandbox(es) an earlier run of stack '{prefix}' left behind"
    assert docker("inspect", made["mine"][0]).returncode != 0
    assert docker("network", "inspect", made["mine"][1]).returncode != 0
    assert docker("inspect", made["theirs"][0]).returncode == 0
    assert docker("network", "inspect", made["theirs"][1]).returncode == 0
    assert reap("docker", prefix) == f"reaped    0 docker sandbox(es) an earlier run of stack '{prefix}' left behind"


def test_rollouts_are_named_under_the_stack_prefix():
    import inspect

    from openenv.harbor import rollout

    from env_server.sandboxes import install_prefix

    original = rollout.run_rollout
    try:
        install_prefix("mystack-")
        wrapped = rollout.run_rollout
        assert wrapped.__wrapped__ is original
        # The keyword OpenEnv 0.10.0 builds trial names from, so a wrong name fails here, not in a sandbox.
        assert "session_prefix" in inspect.signature(original).parameters
    finally:
        rollout.run_rollout = original
