"""Each startup mistake gives one clear line naming the fix (the real entry point, as a subprocess).

An unreachable engine is the exception: it is reported and the server keeps going (the engine starts in
parallel, and each rollout re-probes it). The full start with no engine runs in the image
(tests/integration/env_server), where Harbor is installed; here the engine line itself is checked
against a port nothing listens on.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import free_port

from env_server.checks import check_trials_dir, probe_engine
from stack.readers.env_server import EnvError

REPO = Path(__file__).resolve().parents[3]
STARTER = REPO / "datasets" / "starter"


def start(env: dict) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("E2B_API_KEY", "DATASETS", "SANDBOX")}
    base["PYTHONPATH"] = str(REPO / "services")
    return subprocess.run(
        [sys.executable, "-m", "env_server"], env={**base, **env}, capture_output=True, text=True, timeout=120
    )


def fatal_lines(proc: subprocess.CompletedProcess) -> list[str]:
    return [line for line in proc.stdout.splitlines() if line.startswith("env-server: cannot start:")]


def test_wrong_dataset_path_names_the_fix():
    proc = start({"DATASETS": "/app/datasets/startr", "SANDBOX": "docker"})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    [line] = fatal_lines(proc)
    assert "DATASETS entry '/app/datasets/startr' is not a folder" in line
    assert "fix DATASETS in .env" in line


def test_e2b_without_key_names_the_fix():
    proc = start({"DATASETS": str(STARTER), "SANDBOX": "e2b", "E2B_API_KEY": ""})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    [line] = fatal_lines(proc)
    assert "SANDBOX=e2b needs E2B_API_KEY" in line
    assert "put your key in .env" in line and "SANDBOX=docker" in line


def test_unreachable_engine_is_one_line_and_not_fatal():
    url = f"http://127.0.0.1:{free_port()}/v1"
    status = probe_engine(url, "tiny", timeout=2.0)
    assert not status.reachable
    line = status.line()
    assert "\n" not in line
    assert f"engine    {url} not reachable yet" in line
    assert "serving anyway" in line and "re-probes" in line
    assert "start the engine service or fix ENGINE_URL" in line


def test_trials_dir_must_be_mounted_at_its_own_path_when_driving_the_host_daemon(tmp_path):
    with pytest.raises(EnvError, match="is not mounted into env-server") as info:
        check_trials_dir(str(tmp_path), containerised=True, mounts={"/", "/proc"})
    assert f"'{tmp_path}:{tmp_path}'" in str(info.value)
    assert "writable, same path on host" in check_trials_dir(str(tmp_path), containerised=True, mounts={str(tmp_path)})


def test_docker_mode_without_a_daemon_names_the_socket_mount(monkeypatch, tmp_path):
    # A docker CLI that cannot reach a daemon: DOCKER_HOST points at a socket nobody listens on.
    import shutil as _shutil

    from env_server.checks import check_docker

    if _shutil.which("docker") is None:
        pytest.skip("no docker CLI on this host")
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/nobody.sock")
    with pytest.raises(EnvError, match="Docker daemon does not answer") as info:
        check_docker()
    assert "mount /var/run/docker.sock into env-server" in str(info.value)
