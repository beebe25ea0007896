"""Task env tables see only TASK_ENV_ALLOW: the resolver Harbor's call sites are rebound to (task_env.py)."""

from __future__ import annotations

import pytest

from env_server.task_env import compose_base_env, make_resolver

ENV = {"E2B_API_KEY": "e2b_secret", "HF_TOKEN": "hf_secret", "TEST_DIR": "/tests", "PATH": "/bin"}


def test_allowed_names_resolve_and_literals_pass():
    resolve = make_resolver(frozenset({"TEST_DIR"}), ENV)
    assert resolve({"A": "${TEST_DIR}", "B": "literal", "C": "${TEST_DIR:-x}"}) == {
        "A": "/tests",
        "B": "literal",
        "C": "/tests",
    }


def test_a_secret_reads_as_unset_default_or_a_refusal():
    resolve = make_resolver(frozenset({"TEST_DIR"}), ENV)
    assert resolve({"K": "${E2B_API_KEY:-}"}) == {"K": ""}
    assert resolve({"K": "${HF_TOKEN:-none}"}) == {"K": "none"}
    with pytest.raises(ValueError) as exc:
        resolve({"STOLEN": "${E2B_API_KEY}"})
    assert str(exc.value) == (
        "task.toml asks for host variable 'E2B_API_KEY' (for STOLEN), which is not on TASK_ENV_ALLOW: "
        "env-server gives tasks only the variables listed there"
    )


def test_an_allowed_but_unset_name_keeps_harbors_own_message():
    with pytest.raises(ValueError, match="^Environment variable 'MISSING' not found in host environment$"):
        make_resolver(frozenset({"MISSING"}), ENV)({"X": "${MISSING}"})


def test_compose_gets_its_process_variables_and_the_allow_list_only():
    env = {**ENV, "DOCKER_HOST": "unix:///var/run/docker.sock", "HOME": "/root", "OPENENV_CAPTURE_ADMIN_KEY": "k"}
    assert compose_base_env(frozenset({"TEST_DIR"}), env) == {
        "TEST_DIR": "/tests",
        "PATH": "/bin",
        "DOCKER_HOST": "unix:///var/run/docker.sock",
        "HOME": "/root",
    }
