"""The env-server container against the mock engine, with real mini-swe-agent rollouts in local docker sandboxes.

Everything here is real: the env-server image (this checkout's services/ and datasets/ mounted over its
own), OpenEnv's harbor server and capture proxy, Harbor's `docker` environment building the starter
task's image on the host daemon, mini-swe-agent pre-installed in it, the mock engine (vLLM's wire
format, a real tiny LM, scripted mode on), and the tunnel stand-in as the sandbox's route to the proxy
(it listens on the docker bridge address and forwards only to the capture port, as in the CPU form).
The one stand-in for another service: this test publishes the hand-off itself, after checking that the
stand-in URL serves this proxy's own /health instance, which is what tunnel-check does.

Driven from the host (docker CLI), because Harbor bind-mounts trial folders that the host daemon
resolves on the host: TRIALS_DIR must be the same path here, in env-server, and on the host.

Order matters and is the story: the server starts with no engine and no URL, refuses a rollout, then
the engine comes up, a URL is verified, the tunnel "restarts" with a new URL, and a rollout runs through
the NEW URL with no env-server restart; finally SIGTERM during a rollout closes its sandbox.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import httpx
import pytest
from support import docker_missing, free_port, wait_until

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[3]
ES_IMAGE = os.environ.get("ENV_SERVER_IMAGE", "asyncgrpo-harbor/env-server:local")
MOCK_IMAGE = os.environ.get("MOCK_ENGINE_IMAGE", "asyncgrpo-harbor/mock-engine:local")
SPLIT = "/app/datasets/starter"
TASK = 2  # write-greeting (tasks are listed sorted by folder name)
ADMIN_KEY = "it-admin-" + secrets.token_hex(8)


def docker(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    proc = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"docker {' '.join(args[:3])} failed: {proc.stderr.strip()[:400]}")
    return proc


def _ready() -> str | None:
    if shutil.which("docker") is None or docker("info", check=False, timeout=20).returncode != 0:
        return "no Docker daemon"
    for image in (ES_IMAGE, MOCK_IMAGE):
        if docker("image", "inspect", image, check=False).returncode != 0:
            return f"image {image} is not built"
    return None


class Stack:
    def __init__(self) -> None:
        tag = secrets.token_hex(3)
        self.prefix = f"es-it-{tag}"
        self.root = Path(tempfile.gettempdir()) / f"asyncgrpo-es-it-{tag}"  # scripts/test: under .run/tmp
        self.trials = self.root / "trials"
        self.handoff = self.root / "handoff"
        self.models = self.root / "models"
        for d in (self.trials, self.handoff, self.models):
            d.mkdir(parents=True, exist_ok=True)
        self.engine_port, self.api_port, self.capture_port, self.metrics_port = (free_port() for _ in range(4))
        self.containers: list[str] = []

        self.env_server_name = "env-server"
        self.public_url = ""

    @property
    def env_server(self) -> str:
        return f"{self.prefix}-{self.env_server_name}"

    def run(self, name: str, image: str, *options: str, command: tuple[str, ...] = ()) -> str:
        full = f"{self.prefix}-{name}"
        docker("rm", "-f", full, check=False)
        docker(
            "run",
            "-d",
            "--name",
            full,
            "--network",
            "host",
            "--init",
            "--label",
            "asyncgrpo-harbor.test=1",
            *options,
            image,
            *command,
            timeout=60,
        )
        self.containers.append(full)
        return full

    def start_env_server(self, name: str = "env-server", *extra: str) -> None:
        self.env_server_name = name
        self.run(
            name,
            ES_IMAGE,
            "-v",
            f"{REPO}/services:/app/services:ro",
            "-v",
            f"{REPO}/datasets:/app/datasets:ro",
            "-v",
            "/var/run/docker.sock:/var/run/docker.sock",
            "-v",
            f"{self.trials}:{self.trials}",
            "-v",
            f"{self.handoff}:/handoff",
            "-e",
            f"ENV_SERVER_PORT={self.api_port}",
            "-e",
            f"CAPTURE_PORT={self.capture_port}",
            "-e",
            f"ENGINE_URL=http://127.0.0.1:{self.engine_port}",
            "-e",
            "MODEL=/app/models/tiny-agent",
            "-e",
            "SANDBOX=docker",
            "-e",
            "AGENT_INSTALL=preinstalled",
            "-e",
            f"TRIALS_DIR={self.trials}",
            "-e",
            "HANDOFF_DIR=/handoff",
            "-e",
            f"OPENENV_CAPTURE_ADMIN_KEY={ADMIN_KEY}",
            "-e",
            "MAX_CONCURRENT_ENVS=2",
            "-e",
            "MAX_INFLIGHT_ROLLOUTS=2",
            "-e",
            "ENV_SERVER_SHUTDOWN_GRACE_S=75",
            # Its own stack name: env-server reaps every earlier sandbox under its name at start, and
            # the CPU stack (or another test run) on this host must not be taken for a leftover.
            "-e",
            f"STACK_NAME={self.prefix}",
            *extra,  # after the defaults: with `docker run -e`, the last value of a name wins
        )

    def start_engine(self) -> None:
        # The mock image builds its model at image build time in newer versions; build one here otherwise.
        script = (
            "d=/app/models/tiny-agent; [ -d $d ] || { d=/models/tiny-agent; "
            "[ -d $d ] || python -m mock_engine.build_model $d >/dev/null; }; "
            "MOCK_MODEL_DIR=$d exec python -m mock_engine"
        )
        self.run(
            "engine",
            MOCK_IMAGE,
            "-v",
            f"{REPO}:/repo:ro",
            "-v",
            f"{self.models}:/models",
            "-e",
            "PYTHONPATH=/repo/services",
            "-e",
            f"ENGINE_PORT={self.engine_port}",
            "-e",
            "MODEL=/app/models/tiny-agent",
            "-e",
            "MOCK_SCRIPT_FILE=/repo/datasets/starter/scripted-actions.json",
            # Always on script: the assertion is about the plumbing, and a solved task proves the verifier ran.
            "-e",
            "MOCK_SCRIPT_PROB=1.0",
            command=("sh", "-c", script),
        )

    def start_standin(self) -> str:
        """(Re)start the tunnel stand-in; every start announces a NEW URL, as a restarted quick tunnel does."""
        self.run(
            "standin",
            ES_IMAGE,
            "-v",
            f"{REPO}/services:/repo/services:ro",
            "-e",
            "PYTHONPATH=/repo/services",
            "-e",
            f"CAPTURE_PORT={self.capture_port}",
            "-e",
            f"TUNNEL_METRICS_PORT={self.metrics_port}",
            command=("python", "-m", "tunnel_standin"),
        )

        def announced():
            try:
                return httpx.get(f"http://127.0.0.1:{self.metrics_port}/quicktunnel", timeout=2).json()["hostname"]
            except (httpx.HTTPError, ValueError, KeyError):
                return None

        host = wait_until(announced, 60, "the stand-in's URL", poll_s=1)
        return host if host.startswith("http") else f"https://{host}"

    def verify_and_publish(self, url: str) -> None:
        """What tunnel-check does: the URL must serve THIS proxy's /health instance, then it is handed over."""
        from stack import handoff

        local = httpx.get(f"http://127.0.0.1:{self.capture_port}/health", timeout=5).json()["instance"]
        remote = wait_until(lambda: _instance(url), 30, f"{url}/health", poll_s=1)
        assert remote == local, f"{url} serves another proxy ({remote} != {local})"
        # No tunnel-check re-verifies it here, so the record promises long enough for the test.
        handoff.publish(url, local, "test-standin", 600.0, self.handoff)
        self.public_url = url

    def logs(self) -> str:
        proc = docker("logs", self.env_server, check=False)
        return proc.stdout + proc.stderr

    def healthy(self) -> bool:
        proc = docker(
            "exec",
            "-e",
            f"ENV_SERVER_PORT={self.api_port}",
            "-e",
            f"CAPTURE_PORT={self.capture_port}",
            self.env_server,
            "python",
            "-m",
            "env_server.healthcheck",
            check=False,
            timeout=30,
        )
        return proc.returncode == 0

    def trial_dirs(self) -> list[Path]:
        return sorted(p for p in self.trials.iterdir() if p.is_dir())

    def close(self) -> None:
        for name in reversed(self.containers):
            docker("rm", "-f", name, check=False)
        # Harbor's trial folders are written by root in the container.
        docker(
            "run", "--rm", "-v", f"{self.root}:/gone", ES_IMAGE, "sh", "-c", "rm -rf /gone/* /gone/.[!.]*", check=False
        )
        shutil.rmtree(self.root, ignore_errors=True)


def _instance(url: str) -> str | None:
    try:
        return httpx.get(f"{url}/health", timeout=3).json().get("instance")
    except (httpx.HTTPError, ValueError):
        return None


def run_rollout(stack: Stack, **kw):
    from openenv.harbor.client import HarborEnv

    args = dict(
        split=SPLIT,
        task_index=TASK,
        harness="mini-swe-agent",
        sandbox="docker",
        agent_step_limit=4,
        agent_timeout_sec=300,
        sampling={"temperature": 1.0},
    )
    args.update(kw)
    with HarborEnv(base_url=f"http://127.0.0.1:{stack.api_port}") as env:
        return env.run_rollout(**args)


@pytest.fixture(scope="module")
def stack():
    why = _ready()
    if why:
        docker_missing(why)
    s = Stack()
    try:
        s.start_env_server()
        yield s
    finally:
        s.close()


def test_starts_healthy_without_engine_and_says_what_is_missing(stack):
    wait_until(stack.healthy, 300, "env-server healthcheck", poll_s=3)
    logs = stack.logs()
    assert f"dataset   {SPLIT}: 3 tasks" in logs
    assert "docker    daemon" in logs
    assert f"trials    {stack.trials} (writable, same path on host)" in logs
    assert "AGENT_INSTALL=preinstalled" in logs
    assert f"engine    http://127.0.0.1:{stack.engine_port}/v1 not reachable yet" in logs
    assert "serving anyway" in logs
    assert "tunnel    no URL verified yet" in logs
    assert "admin key from OPENENV_CAPTURE_ADMIN_KEY" in logs
    assert ADMIN_KEY not in logs
    assert f"reaped    0 docker sandbox(es) an earlier run of stack '{stack.prefix}-' left behind" in logs
    assert "task env  tasks may read these env-server variables through ${VAR}: none (TASK_ENV_ALLOW)" in logs


def test_services_bind_loopback_only(stack):
    # The sandbox network reaches the host at the bridge address; neither port may answer there.
    bridge = "172.17.0.1"
    for port in (stack.capture_port, stack.api_port):
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"http://{bridge}:{port}/health", timeout=3)


def test_no_rollout_before_a_url_is_verified(stack):
    result = run_rollout(stack)
    assert result.ok is False and result.reward is None
    assert result.error.startswith("tunnel not verified yet")
    assert stack.trial_dirs() == []  # no trial, so no sandbox was started


def test_rollout_runs_in_a_docker_sandbox_through_the_new_url(stack):
    stack.start_engine()
    wait_until(lambda: _models(stack.engine_port), 300, "the mock engine", poll_s=2)
    first = stack.start_standin()
    stack.verify_and_publish(first)
    # The quick tunnel restarts: a new URL, verified and handed over; env-server is not restarted.
    second = stack.start_standin()
    assert second != first
    stack.verify_and_publish(second)

    result = run_rollout(stack)
    assert result.ok, f"rollout failed: {result.error} {result.findings}"
    assert result.rollout_type == "train" and result.capture_level == "tokens"
    # MOCK_SCRIPT_PROB=1.0: the mock plays the starter task's scripted actions, which solve it; the verifier ran.
    assert result.reward == 1.0, (result.reward, result.error, result.findings)
    trainable = [t for t in result.turns if t.trainable]
    assert trainable and all(t.prompt_token_ids and t.completion_token_ids for t in trainable)
    assert result.n_trainable_tokens > 0

    [trial] = stack.trial_dirs()
    assert trial.name.startswith(f"{stack.prefix}--")  # the stack's name, so a restart can reap it
    log = (trial / "trial.log").read_text()
    assert f"api_base={second}/v1" in log and first not in log
    assert "uv tool install" not in log  # preinstalled: nothing downloaded in the sandbox
    # The sandbox's exec and cp calls went to its container through `docker`, not compose (sandbox_calls.py).
    assert "sandbox calls: exec and cp go to container " in log, log[-3000:]


def _models(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _project_containers(trial_name: str) -> list[str]:
    out = docker("ps", "-a", "--format", '{{.Names}} {{.Label "com.docker.compose.project"}}').stdout
    return [line for line in out.splitlines() if trial_name.lower() in line.split(" ")[-1]]


def publish(stack) -> None:
    """Verify and publish the stand-in's URL, as tunnel-check's re-checks would: the last verification may be
    older than the hand-off's validity by now (the rollout test is long). Run on its own (-k), a test first
    brings up what the earlier tests would have: the engine and the tunnel stand-in."""
    if not stack.public_url:
        wait_until(stack.healthy, 300, "env-server healthcheck", poll_s=3)
        stack.start_engine()
        wait_until(lambda: _models(stack.engine_port), 300, "the mock engine", poll_s=2)
        stack.public_url = stack.start_standin()
    stack.verify_and_publish(stack.public_url)


CLIENT = """
import sys
from openenv.harbor.client import HarborEnv
with HarborEnv(base_url=sys.argv[1]) as env:
    env.run_rollout(split=sys.argv[2], task_index=int(sys.argv[3]), harness="mini-swe-agent", sandbox="docker",
                    agent_step_limit=4, agent_timeout_sec=600, sampling={"temperature": 1.0})
"""


def test_a_rollout_whose_trainer_is_killed_is_cancelled_and_its_sandbox_closed(stack):
    publish(stack)
    before = set(stack.trial_dirs())
    client = subprocess.Popen(
        [sys.executable, "-c", CLIENT, f"http://127.0.0.1:{stack.api_port}", SPLIT, str(TASK)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        trial = wait_until(lambda: next(iter(set(stack.trial_dirs()) - before), None), 120, "a new trial folder")
        wait_until(lambda: _project_containers(trial.name), 300, "its sandbox container", poll_s=2)
    finally:
        client.kill()  # SIGKILL: the trainer is gone without a word
        client.wait()
    wait_until(lambda: not _project_containers(trial.name), 120, "the sandbox to be closed", poll_s=2)
    assert "client    gone during a step on /ws: rollout cancelled, its sandbox is being closed" in stack.logs()


def test_sigterm_closes_the_inflight_sandbox(stack):
    publish(stack)
    before = set(stack.trial_dirs())
    outcome: dict = {}
    worker = threading.Thread(
        target=lambda: outcome.setdefault("r", _safe(lambda: run_rollout(stack, agent_timeout_sec=600))), daemon=True
    )
    worker.start()
    trial = wait_until(lambda: next(iter(set(stack.trial_dirs()) - before), None), 120, "a new trial folder", poll_s=1)
    wait_until(lambda: _project_containers(trial.name), 300, "its sandbox container", poll_s=2)

    docker("stop", "-t", "90", stack.env_server, timeout=120)

    assert _project_containers(trial.name) == [], "the sandbox outlived env-server"
    logs = stack.logs()
    assert "shutdown  signal 15: closing 1 in-flight rollout(s)" in logs
    assert "every sandbox closed" in logs
    assert docker("inspect", "-f", "{{.State.ExitCode}}", stack.env_server).stdout.strip() == "0"
    worker.join(timeout=30)


# Kept between runs (165 MB from PyPI), in the project's own folder: scripts/clean removes it.
WHEELHOUSE = REPO / ".run" / "cache" / "es-wheelhouse"


def test_wheelhouse_install_in_a_task_image_without_the_agent(stack):
    """AGENT_INSTALL=wheelhouse: the agent comes from wheels env-server uploads, installed with --no-index."""
    if not any(WHEELHOUSE.glob("mini_swe_agent-2.4.6-*.whl")):
        WHEELHOUSE.mkdir(parents=True, exist_ok=True)
        # Built for the sandbox's Python, in the task's base image: what an operator does once.
        docker(
            "run",
            "--rm",
            "-v",
            f"{WHEELHOUSE}:/wh",
            "python:3.12-slim",
            "sh",
            "-c",
            "python3 -m venv /v && /v/bin/pip download -q -d /wh mini-swe-agent==2.4.6",
            timeout=600,
        )
    bare = stack.root / "bare"
    shutil.copytree(REPO / "datasets" / "starter" / "write-greeting", bare / "write-greeting")
    (bare / "write-greeting" / "environment" / "Dockerfile").write_text(
        "FROM python:3.12-slim\nENV LITELLM_LOCAL_MODEL_COST_MAP=True\nWORKDIR /app\n"
    )
    # A fresh server on the same ports (a new proxy instance): the stand-in still forwards to the capture
    # port, and the URL is verified again for this instance.
    docker("rm", "-f", stack.env_server, check=False)
    stack.start_env_server(
        "env-server-wheelhouse",
        "-v",
        f"{WHEELHOUSE}:/wheelhouse:ro",
        "-v",
        f"{bare}:/bare:ro",
        "-e",
        "AGENT_INSTALL=wheelhouse",
        "-e",
        "WHEELHOUSE_DIR=/wheelhouse",
        "-e",
        "DATASETS=/bare",
    )
    wait_until(stack.healthy, 300, "env-server (wheelhouse) healthcheck", poll_s=3)
    logs = wait_until(
        lambda: "=== env-server startup report" in stack.logs() and stack.logs(), 60, "the startup report", poll_s=1
    )
    assert "agent     wheelhouse /wheelhouse (mini_swe_agent-2.4.6-py3-none-any.whl)" in logs, logs[-3000:]
    publish(stack)

    before = set(stack.trial_dirs())
    result = run_rollout(stack, split="/bare", task_index=0)
    assert result.ok, f"rollout failed: {result.error} {result.findings}"
    assert result.rollout_type == "train" and result.n_trainable_tokens > 0
    [trial] = set(stack.trial_dirs()) - before
    log = (trial / "trial.log").read_text()
    assert "--no-index --find-links /tmp/asyncgrpo-wheelhouse" in log
    assert "uv tool install" not in log and "astral.sh" not in log


def _safe(fn):
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - the server goes away mid-call; that is the point
        return exc
