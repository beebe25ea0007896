"""env-server's startup refusals for a sandbox backend it cannot drive, each its exact one line: no docker CLI,
no daemon answering, no compose v2 plugin, SANDBOX=e2b without a key, AGENT_INSTALL=wheelhouse without a wheel.

The docker CLI is a real executable on PATH that answers the way the real one does in each case (a stub
script: the host's own docker would answer for this host's daemon, whatever the case under test).
"""

import stat

import pytest

from env_server.checks import EnvError, check_docker, check_sandbox
from stack.readers.env_server import Settings


def docker_cli(tmp_path, monkeypatch, script: str) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "docker"
    exe.write_text("#!/bin/sh\n" + script)
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", str(bin_dir))


def test_no_docker_cli(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing on it
    with pytest.raises(EnvError) as err:
        check_docker()
    assert str(err.value) == "SANDBOX=docker needs the docker CLI in env-server: rebuild images/env-server"


def test_a_daemon_that_does_not_answer_is_named_with_the_clis_words(tmp_path, monkeypatch):
    docker_cli(
        tmp_path,
        monkeypatch,
        'echo "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?" >&2\n'
        "exit 1\n",
    )
    with pytest.raises(EnvError) as err:
        check_docker()
    assert str(err.value) == (
        "SANDBOX=docker but the Docker daemon does not answer from env-server (Cannot connect to the Docker daemon "
        "at unix:///var/run/docker.sock. Is the docker daemon running?): mount /var/run/docker.sock into "
        "env-server (compose.cpu.yaml does)"
    )


def test_an_empty_answer_from_docker_info_is_no_daemon(tmp_path, monkeypatch):
    docker_cli(tmp_path, monkeypatch, "exit 0\n")  # `docker info --format` prints nothing when no daemon answers
    with pytest.raises(EnvError) as err:
        check_docker()
    assert str(err.value) == (
        "SANDBOX=docker but the Docker daemon does not answer from env-server (`docker info` exited 0 with no "
        "server version): mount /var/run/docker.sock into env-server (compose.cpu.yaml does)"
    )


def test_no_compose_plugin(tmp_path, monkeypatch):
    docker_cli(
        tmp_path,
        monkeypatch,
        'case "$1" in info) echo 27.5.1 ;; compose) echo "docker: unknown command: docker compose" >&2; exit 1 ;; '
        "esac\n",
    )
    with pytest.raises(EnvError) as err:
        check_docker()
    assert str(err.value) == (
        "SANDBOX=docker needs the compose v2 plugin (`docker compose`) in env-server: rebuild images/env-server"
    )


def test_a_working_cli_reports_both_versions(tmp_path, monkeypatch):
    docker_cli(tmp_path, monkeypatch, 'case "$1" in info) echo 27.5.1 ;; compose) echo 2.26.1 ;; esac\n')
    assert check_docker() == "docker    daemon 27.5.1, compose 2.26.1"


def test_e2b_without_a_key():
    with pytest.raises(EnvError) as err:
        check_sandbox(Settings(sandbox="e2b", credentials_set=()))
    # The same line preflight prints (one rule, stack/backends.py).
    assert str(err.value) == (
        "SANDBOX=e2b needs E2B_API_KEY: put your key in .env (E2B_API_KEY=e2b_..., from your E2B dashboard), or use "
        "SANDBOX=docker"
    )


def test_a_wheelhouse_without_the_agents_wheel(tmp_path):
    (tmp_path / "requests-2.32.3-py3-none-any.whl").write_text("")  # other wheels do not count
    settings = Settings(
        sandbox="e2b", credentials_set=("E2B_API_KEY",), agent_install="wheelhouse", wheelhouse_dir=str(tmp_path)
    )
    with pytest.raises(EnvError) as err:
        check_sandbox(settings)
    assert str(err.value) == (
        f"AGENT_INSTALL=wheelhouse but {tmp_path} holds no mini_swe_agent wheel: run `pip download "
        "mini-swe-agent==2.4.6 -d <dir>` for the sandbox's Python and mount it at WHEELHOUSE_DIR, or use "
        "AGENT_INSTALL=preinstalled"
    )
    (tmp_path / "mini_swe_agent-2.4.6-py3-none-any.whl").write_text("")
    assert check_sandbox(settings).lines == [
        "e2b       E2B_API_KEY is set (not validated until the first sandbox)",
        f"agent     wheelhouse {tmp_path} (mini_swe_agent-2.4.6-py3-none-any.whl)",
    ]
