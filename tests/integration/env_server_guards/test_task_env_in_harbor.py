"""TASK_ENV_ALLOW against Harbor 0.25.0 itself: every call site that fills task.toml `${VAR}` from the
environment, and docker compose's environment, see only the allow-list once `task_env.install` ran."""

from __future__ import annotations

import logging
import os

import pytest

from env_server import task_env


@pytest.fixture
def secrets_in_env(monkeypatch):
    monkeypatch.setenv("E2B_API_KEY", "e2b_live_secret")
    monkeypatch.setenv("HF_TOKEN", "hf_live_secret")
    monkeypatch.setenv("TEST_DIR", "/tests")
    line = task_env.install(("TEST_DIR",))
    assert line == "task env  tasks may read these env-server variables through ${VAR}: TEST_DIR (TASK_ENV_ALLOW)"


@pytest.mark.parametrize(
    "module",
    [
        "harbor.utils.env",
        "harbor.environments.base",
        "harbor.environments.docker.docker",
        "harbor.verifier.verifier",
        "harbor.agents.oracle",
    ],
)
def test_every_harbor_resolver_sees_only_the_allow_list(secrets_in_env, module):
    import importlib

    resolve = importlib.import_module(module).resolve_env_vars
    assert resolve({"A": "${TEST_DIR}", "B": "${HF_TOKEN:-}"}) == {"A": "/tests", "B": ""}
    with pytest.raises(ValueError, match="^task.toml asks for host variable 'E2B_API_KEY' \\(for STOLEN\\)"):
        resolve({"STOLEN": "${E2B_API_KEY}"})


def test_docker_compose_runs_without_the_secrets(secrets_in_env):
    from harbor.environments.docker import docker

    env = docker.merge_compose_env(
        base_env=os.environ, user_env={"TASK_VAR": "1"}, infra_env={"MAIN_IMAGE_NAME": "x"}, logger=logging.getLogger()
    )
    assert "E2B_API_KEY" not in env and "HF_TOKEN" not in env
    assert env["PATH"] == os.environ["PATH"] and env["TEST_DIR"] == "/tests"
    assert (env["TASK_VAR"], env["MAIN_IMAGE_NAME"]) == ("1", "x")
