"""A docker sandbox's exec and cp through plain `docker` (env_server/sandbox_calls.py) do what Harbor 0.25.0's
`docker compose` calls did, through Harbor's own DockerEnvironment and a real Docker daemon.

One sandbox of a task whose image is `FROM python:3.12-slim` (the local base; nothing is pulled) runs the same
operations twice, compose first, then with the wrapper installed: exec with a working directory, variables and
a user, an exit code, stdin (Harbor's tar upload), a command that outlives its timeout, and file and folder
copies both ways. Every result must be the same, and with the wrapper every exec and cp must have started a
`docker exec` / `docker cp` process and no compose one (recorded at asyncio's process start, which both
Harbor and the wrapper call).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import pytest
from docker_cli import require_daemon
from one_sandbox import remove, task_environment

from env_server import sandbox_calls, sandbox_stop

pytestmark = pytest.mark.docker


@pytest.fixture
def environment(tmp_path):
    require_daemon()
    env = task_environment(tmp_path, "calls", "RUN useradd -u 1234 agent && mkdir /work\n")
    asyncio.run(env.start(force_build=False))
    yield env, tmp_path
    remove(env)


def record_processes(monkeypatch) -> list[list[str]]:
    """Every process Harbor or the wrapper starts from now on (both go through asyncio's process start), as argv."""
    started: list[list[str]] = []
    real = asyncio.create_subprocess_exec

    async def recording(*args, **kwargs):
        started.append([str(a) for a in args])
        return await real(*args, **kwargs)

    monkeypatch.setattr(asyncio, "create_subprocess_exec", recording)
    return started


def keep_harbors(monkeypatch) -> None:
    """Harbor's own method comes back after the test: the suite's other tests run compose as Harbor does."""
    from harbor.environments.docker.docker import DockerEnvironment

    monkeypatch.setattr(DockerEnvironment, "_run_docker_compose_command", DockerEnvironment._run_docker_compose_command)


async def operations(env, scratch: Path) -> dict:
    """What a trial asks of its sandbox, each result reduced to what the trial reads."""
    host_dir = scratch / "up"
    host_dir.mkdir(exist_ok=True)
    (host_dir / "a.txt").write_text("alpha\n")
    (host_dir / "sub").mkdir(exist_ok=True)
    (host_dir / "sub" / "b.txt").write_text("beta\n")
    out: dict = {}
    r = await env.exec("pwd; echo $GREETING; id -u", cwd="/work", env={"GREETING": "hi there"}, user="agent")
    out["exec"] = (r.return_code, r.stdout)
    r = await env.exec("echo to-stderr >&2; exit 3")
    out["exit code"] = (r.return_code, r.stdout, r.stderr)
    try:
        r = await env.exec("sleep 30", timeout_sec=2)
        out["timeout"] = ("returned", r.return_code)
    except RuntimeError as exc:
        out["timeout"] = ("raised", str(exc))
    await env._platform._extract_tar(env._platform._tar_dir_contents(host_dir), "/from-tar")  # stdin
    out["is dir"] = await env._platform._container_path_is_dir("/from-tar")
    await env.upload_file(host_dir / "a.txt", "/work/copied.txt")
    await env.upload_dir(host_dir, "/work/tree")
    r = await env.exec("cat /from-tar/sub/b.txt /work/copied.txt; find /work/tree -type f | sort")
    out["uploaded"] = r.stdout
    down = scratch / f"down-{len(list(scratch.iterdir()))}"
    down.mkdir()  # Harbor's trial folders exist before a download (else Harbor retries with its own `docker cp`)
    await env.download_file("/work/copied.txt", down / "one.txt")
    await env.download_dir("/work/tree", down / "tree")
    out["downloaded"] = sorted(str(p.relative_to(down)) for p in down.rglob("*"))
    await env.exec("rm -rf /from-tar /work/copied.txt /work/tree", user="root")
    return out


def test_exec_and_cp_through_docker_match_compose_and_start_no_compose_process(environment, monkeypatch):
    env, scratch = environment
    started = record_processes(monkeypatch)
    keep_harbors(monkeypatch)
    through_compose = asyncio.run(operations(env, scratch))
    assert any("compose" in argv and "exec" in argv for argv in started), "the first pass must use compose"

    sandbox_calls.install()
    started.clear()
    through_docker = asyncio.run(operations(env, scratch))
    assert through_docker == through_compose
    assert through_docker["exec"] == (0, "/work\nhi there\n1234\n")
    assert through_docker["exit code"][0] == 3
    assert through_docker["is dir"] is True
    verbs = [argv[argv.index("compose") + 1 :] for argv in started if "compose" in argv]
    assert not [v for v in verbs if {"exec", "cp"} & set(v)], verbs  # no compose process for an exec or a cp
    engine = Counter(argv[1] for argv in started if argv[0].endswith("docker") and "compose" not in argv)
    # One `ps` finds the container; then each of the eight execs and four copies above is one process.
    assert engine == {"ps": 1, "exec": 8, "cp": 4}, engine


def test_install_is_idempotent_and_says_what_it_does(monkeypatch):
    from harbor.environments.docker.docker import DockerEnvironment

    keep_harbors(monkeypatch)
    line = sandbox_calls.install()
    sandbox_calls.install()
    assert line.startswith("sandbox   exec and cp: `docker`")
    assert not hasattr(DockerEnvironment._run_docker_compose_command.__wrapped__, "__wrapped__")


def test_a_trial_start_builds_once_and_runs_no_down_before_its_up(tmp_path, monkeypatch):
    """Harbor's `start` runs `down`, `build`, then `up`; under Harbor's `pull_policy: build` that `up` printed a
    whole BuildKit run, building the image a second time. With sandbox-stop.compose.yaml (`pull_policy: missing`)
    `up` starts the image `build` has just tagged, and a new session's `down` is skipped (sandbox_calls.py)."""
    require_daemon()
    from harbor.environments.docker.docker import DockerEnvironment

    keep_harbors(monkeypatch)
    monkeypatch.setattr(DockerEnvironment, "_docker_compose_paths", DockerEnvironment.__dict__["_docker_compose_paths"])
    sandbox_stop.install()
    sandbox_calls.install()
    outputs: dict[str, str] = {}
    installed = DockerEnvironment._run_docker_compose_command

    async def recording_call(self, command, *args, **kwargs):
        result = await installed(self, command, *args, **kwargs)
        outputs[command[0]] = result.stdout or ""
        return result

    started = record_processes(monkeypatch)
    monkeypatch.setattr(DockerEnvironment, "_run_docker_compose_command", recording_call)
    env = task_environment(tmp_path, "builds")
    try:
        asyncio.run(env.start(force_build=False))
        verbs = [next(a for a in argv if a in ("build", "up", "down")) for argv in started if "compose" in argv]
        assert verbs == ["build", "up"], verbs
        assert "load build definition" in outputs["build"], outputs["build"][-2000:]
        assert "load build definition" not in outputs["up"], outputs["up"][-2000:]
        assert asyncio.run(env.exec("echo up")).stdout == "up\n"
    finally:
        remove(env)
