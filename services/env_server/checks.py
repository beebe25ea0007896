"""Startup checks: each returns what is usable, or raises `EnvError` with the one line that names the fix.

Fatal: a dataset that does not resolve, a sandbox backend that cannot work (SANDBOX=e2b without a key,
SANDBOX=docker without a daemon or without TRIALS_DIR mounted at its own path), a wheelhouse that is
not there. Not fatal: the engine. It starts in parallel with this server and every rollout names its
engine, so an engine that is not up yet is reported and re-probed when a rollout starts.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from stack import datasets as task_check
from stack import fields, handoff, mountinfo
from stack.backends import SANDBOXES
from stack.facts import DEFAULT_DATASET
from stack.readers.env_server import REMOTE_TASKS_OK_PHRASE, EnvError, Settings

# --- datasets -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DatasetStatus:
    spec: str
    num_tasks: int
    # DATASET_BAD_TASKS=skip: one line per task left out (stack/datasets.py), printed in the start report.
    skipped: tuple[str, ...] = ()

    def line(self) -> str:
        if not self.skipped:
            return f"dataset   {self.spec}: {self.num_tasks} tasks"
        return (
            f"dataset   {self.spec}: {self.num_tasks} tasks served, {len(self.skipped)} skipped "
            "(DATASET_BAD_TASKS=skip; each below)"
        )


_looks_like_path = task_check.is_local


def _serve_only(spec: str, good: list[Path]) -> None:
    """Every later lookup of `spec` (the Task API, rollouts, prebuild) gets the tasks that passed.

    Relies on openenv 0.10.0's `openenv.harbor.tasks._CACHE` (read there): `resolve_task_dirs` answers from it
    for the life of the process, and nothing in the served paths asks it to refresh."""
    from openenv.harbor import tasks

    with tasks._LOCK:
        tasks._CACHE[spec] = list(good)


def check_datasets(
    specs: tuple[str, ...],
    *,
    max_chars: int = fields.TASK_INSTRUCTION_MAX_CHARS.default,
    bad_tasks: str = fields.DATASET_BAD_TASKS.default,
) -> list[DatasetStatus]:
    """Resolve every dataset with OpenEnv's own resolver (Hub id, `name@version`, or a folder), then check
    each task it found (stack/datasets.py): a bad one refuses the start, one line per task, or
    (DATASET_BAD_TASKS=skip) is left out of what is served and counted."""
    from openenv.harbor.tasks import resolve_task_dirs

    found: list[DatasetStatus] = []
    for spec in specs:
        if _looks_like_path(spec) and not Path(spec).expanduser().is_dir():
            # Without this, OpenEnv would treat a mistyped folder as a Harbor registry name and fail
            # later with a registry error that never mentions the path.
            raise EnvError(
                f"DATASETS entry {spec!r} is not a folder inside env-server: fix DATASETS in .env "
                f"(default {DEFAULT_DATASET}) or mount that folder into the env-server container"
            )
        try:
            dirs = resolve_task_dirs(spec)
        except Exception as exc:  # noqa: BLE001 - any failure here is a dataset the server cannot serve
            detail = " ".join(str(exc).split())[:200]
            raise EnvError(
                f"DATASETS entry {spec!r} did not resolve ({type(exc).__name__}: {detail}); fix DATASETS "
                "in .env: a local folder of Harbor tasks, a Hub dataset id (needs HF_TOKEN for a private "
                "one), or a Harbor registry name@version"
            ) from None
        checked = task_check.check(spec, dirs, max_chars)
        if checked.bad and bad_tasks != "skip":
            raise EnvError(checked.bad)
        if not checked.good:
            raise EnvError(
                f"DATASETS entry {spec!r}: none of its {len(dirs)} tasks passed the dataset check, so nothing "
                f"would be served: fix them ({checked.bad[0]})"
            )
        if checked.bad:
            _serve_only(spec, checked.good)
        found.append(DatasetStatus(spec, len(checked.good), tuple(checked.bad)))
    return found


def check_dataset_sources(settings: Settings) -> None:
    """SANDBOX=docker takes local dataset folders only, unless the operator said otherwise in so many words.

    A local docker sandbox is built from the task's own Dockerfile and docker-compose.yaml on this host's
    daemon, through a socket that is root on the host (a compose file can bind-mount `/`). A task from
    the Hub or a registry is code from a stranger; E2B sandboxes run it on E2B's machines instead.
    """
    if not SANDBOXES.get(settings.sandbox).host_docker or settings.remote_tasks_ok:
        return
    remote = [spec for spec in settings.datasets if not _looks_like_path(spec)]
    if remote:
        raise EnvError(
            f"SANDBOX=docker builds each task's Dockerfile and compose file on this host's Docker daemon, so it "
            f"takes local dataset folders only, and DATASETS entry {remote[0]!r} is not one: download it, read "
            "it, and point DATASETS at the folder; or set SANDBOX_DOCKER_REMOTE_TASKS_OK="
            f"{REMOTE_TASKS_OK_PHRASE}"
        )


def drop_unneeded_hf_token(specs: tuple[str, ...], environ: Any) -> str:
    """HF_TOKEN stays in env-server only while a dataset comes from the Hub; returns the report line.

    The datasets are resolved (downloaded) at startup; with every one a local folder nothing here uses
    the token, and a variable that is not in this process cannot reach a task or a log.
    """
    if not environ.get("HF_TOKEN"):
        return "hf token  not set"
    if any(not _looks_like_path(spec) for spec in specs):
        return "hf token  kept: a dataset comes from the Hub or a registry"
    environ.pop("HF_TOKEN", None)
    return "hf token  dropped from env-server's environment: every dataset is a local folder"


# --- sandbox backend ------------------------------------------------------------------------------


@dataclass
class SandboxReport:
    backend: str
    lines: list[str] = field(default_factory=list)


def _mount_points() -> set[str]:
    try:
        return mountinfo.mount_points(mountinfo.read())
    except OSError:
        return set()


def in_container() -> bool:
    return Path("/.dockerenv").exists()


def check_trials_dir(trials_dir: str, *, containerised: bool, mounts: set[str] | None = None) -> str:
    """TRIALS_DIR must be writable, and inside a container it must be a bind mount.

    Harbor bind-mounts each trial's log folders into the sandbox, and the host daemon resolves those
    paths on the HOST. Unless TRIALS_DIR is mounted at the same absolute path on both sides, the
    verifier writes its reward into a host folder this process never sees: every rollout unscorable.
    """
    path = Path(trials_dir)
    if containerised:
        mounts = _mount_points() if mounts is None else mounts
        if str(path) not in mounts:
            raise EnvError(
                f"SANDBOX=docker drives the host's Docker daemon, which resolves Harbor's bind mounts on the "
                f"host, but TRIALS_DIR={trials_dir} is not mounted into env-server: add the volume "
                f"'{trials_dir}:{trials_dir}' (same absolute path on both sides) to env-server"
            )
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".write-test"
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        raise EnvError(
            f"TRIALS_DIR={trials_dir} is not writable by env-server ({exc.strerror}); fix the folder's "
            "owner on the host or point TRIALS_DIR elsewhere"
        ) from None
    return f"trials    {trials_dir} (writable{', same path on host' if containerised else ''})"


def _run(cmd: list[str], timeout: float = 15.0) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def check_docker() -> str:
    """The docker CLI, compose v2, and a daemon that answers."""
    if shutil.which("docker") is None:
        raise EnvError("SANDBOX=docker needs the docker CLI in env-server: rebuild images/env-server")
    try:
        info = _run(["docker", "info", "--format", "{{.ServerVersion}}"])
    except subprocess.TimeoutExpired:
        info = None
    # `docker info --format` exits 0 with an empty answer when no daemon answers: check the answer.
    if info is None or info.returncode != 0 or not info.stdout.strip():
        # An answer with nothing on stderr is not a timeout (it was reported as one): say what came back.
        if info is None:
            detail = "timed out"
        else:
            detail = " ".join(info.stderr.split())[:160] or (
                f"`docker info` exited {info.returncode} with no server version"
            )
        raise EnvError(
            "SANDBOX=docker but the Docker daemon does not answer from env-server "
            f"({detail}): mount /var/run/docker.sock into env-server (compose.cpu.yaml does)"
        )
    compose = _run(["docker", "compose", "version", "--short"])
    if compose.returncode != 0:
        raise EnvError(
            "SANDBOX=docker needs the compose v2 plugin (`docker compose`) in env-server: rebuild images/env-server"
        )
    return f"docker    daemon {info.stdout.strip()}, compose {compose.stdout.strip()}"


def check_sandbox(settings: Settings, *, containerised: bool | None = None) -> SandboxReport:
    report = SandboxReport(settings.sandbox)
    backend = SANDBOXES.get(settings.sandbox)
    if missing := backend.missing_credentials(settings.credentials_set):
        raise EnvError(missing)
    for name in settings.credentials_set:
        report.lines.append(f"{backend.name:<9} {name} is set (not validated until the first sandbox)")
    if backend.host_docker:
        report.lines.append(check_docker())
        containerised = in_container() if containerised is None else containerised
        report.lines.append(check_trials_dir(settings.trials_dir, containerised=containerised))
    if settings.agent_install == "wheelhouse":
        wheels = sorted(Path(settings.wheelhouse_dir).glob("mini_swe_agent-*.whl"))
        if not wheels:
            raise EnvError(
                f"AGENT_INSTALL=wheelhouse but {settings.wheelhouse_dir} holds no mini_swe_agent wheel: "
                f"run `pip download mini-swe-agent==2.4.6 -d <dir>` for the sandbox's Python and mount it "
                f"at WHEELHOUSE_DIR, or use AGENT_INSTALL=preinstalled"
            )
        report.lines.append(f"agent     wheelhouse {settings.wheelhouse_dir} ({wheels[-1].name})")
    return report


# --- engine ---------------------------------------------------------------------------------------


@dataclass
class EngineStatus:
    url: str
    reachable: bool
    model: str = ""
    capture_level: str = ""
    rollout_type: str = ""
    logprobs_mode: str = ""
    detail: str = ""
    findings: list[str] = field(default_factory=list)
    report: dict[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        if not self.reachable:
            return (
                f"engine    {self.url} not reachable yet ({self.detail}); serving anyway: each rollout "
                "re-probes its engine. If it never comes up, start the engine service or fix ENGINE_URL"
            )
        tier = "TRAIN" if self.rollout_type == "train" else "EVAL ONLY"
        line = f"engine    {self.url} model={self.model} capture_level={self.capture_level} [{tier}]"
        if self.capture_level == "tokens":
            line += f" logprobs={self.logprobs_mode or 'not measured'}"
        return line

    def unproven_line(self) -> str | None:
        """Said plainly when OpenEnv's probe could not tell processed from raw logprobs (it passes then)."""
        if self.capture_level != "tokens" or self.logprobs_mode in ("processed", "raw"):
            return None
        return (
            "          logprobs UNPROVEN by OpenEnv's probe: it leaves top_k/top_p to the model's generation "
            "config, which can mask the runner-up token it measures. The engine's healthcheck pins them and "
            "gates the trainer: `docker compose ps engine` healthy means proven (or accepted by name with "
            "ENGINE_LOGPROBS_UNPROVEN_OK)"
        )


def engine_reachable(url: str, timeout: float = 5.0) -> tuple[bool, str, list[str]]:
    """(answers, why-not, served models) from `GET <url>/models`: cheap enough for every rollout."""
    from openenv.core.harness.capture.upstream import openai_api_base

    try:
        resp = httpx.get(f"{openai_api_base(url)}/models", timeout=timeout)
    except httpx.HTTPError as exc:
        return False, f"{type(exc).__name__}: {exc}"[:160], []
    if resp.status_code != 200:
        return False, f"HTTP {resp.status_code} from /models", []
    try:
        served = [m.get("id", "") for m in resp.json().get("data", [])]
    except ValueError:
        return False, "/models did not return JSON", []
    return True, "", served


def pick_model(wanted: str, served: list[str]) -> str:
    if wanted in served or not served:
        return wanted
    return served[0] if len(served) == 1 else wanted


def probe_engine(url: str, model: str, timeout: float = 5.0) -> EngineStatus:
    """Reachability, then OpenEnv's own engine probe (the one that grades train vs eval)."""
    ok, why, served = engine_reachable(url, timeout)
    if not ok:
        return EngineStatus(url=url, reachable=False, detail=why)
    model = pick_model(model, served)
    from openenv.core.harness.capture.validate_llm import validate_llm

    try:
        report = validate_llm(url, model)
    except Exception as exc:  # noqa: BLE001 - a probe failure is a status, never a crash
        return EngineStatus(url=url, reachable=False, model=model, detail=f"probe failed: {exc}"[:160])
    return EngineStatus(
        url=url,
        reachable=bool(report.reachable),
        model=report.model or model,
        capture_level=report.capture_level or "text",
        rollout_type=report.rollout_type or "eval",
        logprobs_mode=report.logprobs_mode or "",
        detail="" if report.reachable else "probe got no answer",
        findings=[str(f) for f in report.findings if not str(f).startswith("[INFO]")],
        report={
            "url": url,
            "model": report.model or model,
            "ok": report.ok,
            "findings": report.findings,
            "served_models": report.served_models,
            "capture_level": report.capture_level,
            "rollout_type": report.rollout_type,
            "trainable": report.trainable,
            "reachable": report.reachable,
            "logprobs_mode": report.logprobs_mode,
            "tool_support": report.tool_support,
            "authenticated": False,
        },
    )


# --- tunnel hand-off ------------------------------------------------------------------------------


def handoff_line(handoff_dir: str) -> str:
    verified, why = handoff.lookup(handoff_dir)
    if verified is not None:
        return (
            f"tunnel    verified {verified.url} (provider {verified.provider}, checked "
            f"{verified.age_s():.0f}s ago): rollouts advertise it to sandboxes"
        )
    return (
        f"tunnel    {why}; rollouts are refused until tunnel-check verifies the capture proxy's "
        f"public URL (hand-off {handoff.handoff_path(handoff_dir)})"
    )
