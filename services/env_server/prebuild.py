"""Sandbox images for the configured tasks, built in the background at startup (SANDBOX=docker).

Harbor 0.25's docker environment builds a task's image inside the rollout: `DockerEnvironment.start`
runs `docker compose ... build` (harbor/environments/docker/docker.py, `docker-compose-build.yaml`,
`pull_policy: build`) before `up`. On a fresh machine the first rollout of each task paid for that build
(measured: 295 s from `docker compose up` to the first training step, most of it building), while the
engine loaded with the CPU idle. So the env server starts those builds as it boots, in parallel with the
engine's load, through Harbor's own build call with Harbor's own compose files and variables
(`harbor_build`), so the layers a rollout's build asks for are the ones already in the local Docker
cache and its own `compose build` finishes from cache.

A rollout that arrives while its task's image is still building waits for THAT build (`install_wait`
hooks `DockerEnvironment.start`) instead of starting a second build of the same layers beside it. A
failed prebuild is one line in the log and changes nothing else: the rollout then builds as before (and
fails as before, with Harbor's own error, if the Dockerfile is broken). E2B builds its templates on its
side: nothing is prebuilt there.

Tasks are keyed by Harbor's `environment_id` (a hash of the environment folder's content), the identity
Harbor itself tags builds with: tasks that share one environment build once.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger("env_server")

# Builds at once. Each is one `docker build` on the host's daemon; the 2-core CI machine gains nothing
# from more, and the engine's load shares the same cores.
CONCURRENCY = 2


@dataclass(frozen=True)
class Target:
    key: str  # Harbor's environment_id: what the image is built from
    names: tuple[str, ...]  # the tasks that use it (their short names), for the log
    environment_dir: Path
    env_config: Any = None  # harbor's EnvironmentConfig of the first task

    @property
    def label(self) -> str:
        shown = ", ".join(self.names[:3]) + (f" +{len(self.names) - 3}" if len(self.names) > 3 else "")
        return f"{shown} ({self.key[:12]})"


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:240]}"


class Prebuilds:
    """Runs `build(target)` once per target, CONCURRENCY at a time, on threads of its own (the server's
    event loop does not exist yet when they start); reports each start, success and failure through `say`.
    `wait(key)` (async, from any loop) returns when that target's build has finished, whatever its outcome,
    and at once for a key never scheduled.

    Daemon threads, not a ThreadPoolExecutor: the interpreter joins an executor's workers at exit, so a
    SIGTERM during a long build would hold the server's exit until Docker killed it at the grace period."""

    def __init__(self, build: Callable[[Target], None], say: Callable[[str], None], concurrency: int = CONCURRENCY):
        self._build = build
        self._say = say
        self.concurrency = concurrency
        self._slots = threading.BoundedSemaphore(concurrency)
        self._futures: dict[str, concurrent.futures.Future] = {}
        self._lock = threading.Lock()
        self.outcomes: dict[str, str] = {}  # key -> "built" | "failed: ..."

    def start(self, targets: Iterable[Target]) -> list[str]:
        """Schedule every target; returns the startup report's lines (the builds report themselves later).

        The first target builds alone, the rest once it is done: a dataset's task images usually share
        their first layers (the starter tasks share the mini-swe-agent install), and this Docker's
        classic builder runs a layer twice when two builds reach it at once. Measured on the 2-core
        machine from a cold cache: two starter images side by side took 86 s each; the rest then came
        from the cache in 0 s. The first target is the first task served, usually the warm-up's."""
        targets = list(targets)
        first: concurrent.futures.Future | None = None
        for target in targets:
            with self._lock:
                if target.key in self._futures:
                    continue
                future: concurrent.futures.Future = concurrent.futures.Future()
                self._futures[target.key] = future
            threading.Thread(target=self._slot, args=(target, future, first), name="prebuild", daemon=True).start()
            first = first or future
        if not targets:
            return ["prebuild  no task image to build (every task names a prebuilt docker_image)"]
        return [
            f"prebuild  {len(targets)} sandbox image(s) building in the background while the engine loads, the "
            f"first alone, then {self.concurrency} at a time: {'; '.join(t.label for t in targets)}"
        ]

    def _slot(self, target: Target, future: concurrent.futures.Future, after: concurrent.futures.Future | None) -> None:
        try:
            if after is not None:
                concurrent.futures.wait([after])
            with self._slots:
                self._run(target)
        finally:
            future.set_result(None)

    def _run(self, target: Target) -> None:
        t0 = time.monotonic()
        self._say(f"prebuild  {target.label}: building")
        try:
            self._build(target)
        except BaseException as exc:  # noqa: BLE001 - one failed image is a line, never a stopped server
            self.outcomes[target.key] = f"failed: {_one_line(exc)}"
            self._say(
                f"prebuild  {target.label}: FAILED after {time.monotonic() - t0:.0f} s ({_one_line(exc)}); "
                "its first rollout builds it again"
            )
            return
        self.outcomes[target.key] = "built"
        self._say(f"prebuild  {target.label}: done in {time.monotonic() - t0:.0f} s")

    def pending(self, key: str) -> bool:
        future = self._futures.get(key)
        return future is not None and not future.done()

    async def wait(self, key: str) -> None:
        future = self._futures.get(key)
        if future is not None and not future.done():
            await asyncio.wrap_future(future)

    def join(self, timeout: float | None = None) -> None:
        """Every scheduled build finished (tests; shutdown)."""
        concurrent.futures.wait(list(self._futures.values()), timeout=timeout)


# --- Harbor's side -------------------------------------------------------------------------------------


def targets(task_dirs: Iterable[Path]) -> list[Target]:
    """One target per distinct environment Harbor would build from a Dockerfile (tasks naming a prebuilt
    `docker_image` are pulled by Harbor at `up`, not built). A task Harbor cannot read is left to its
    rollout, which reports it."""
    from harbor.environments.definition import environment_content_hash, should_use_prebuilt_docker_image
    from harbor.models.task.task import Task

    found: dict[str, Target] = {}
    for task_dir in task_dirs:
        try:
            task = Task(task_dir)
            env_dir = task.paths.environment_dir
            env_config = task.config.environment
            if should_use_prebuilt_docker_image(env_dir, docker_image=env_config.docker_image, force_build=False):
                continue
            # What `BaseEnvironment.environment_id` returns for this task's environment.
            key = environment_content_hash(env_dir, docker_image=env_config.docker_image)
        except Exception as exc:  # noqa: BLE001
            log.warning("prebuild: skipping %s (%s)", task_dir, _one_line(exc))
            continue
        if key in found:
            found[key] = Target(
                key, (*found[key].names, task.short_name), found[key].environment_dir, found[key].env_config
            )
        else:
            found[key] = Target(key, (task.short_name,), env_dir, env_config)
    return list(found.values())


def _environment(
    environment_dir: Path, name: str, session_id: str, env_config: Any, trial_dir: Path | None = None
) -> Any:
    """Harbor's DockerEnvironment for a task, as a trial makes it (harbor/trial/trial.py: environment_dir,
    environment_name=task.short_name, task_env_config), with throwaway trial folders under `trial_dir` (a
    build mounts none); without one, a new temporary folder the caller leaves behind."""
    from harbor.environments.docker.docker import DockerEnvironment
    from harbor.models.trial.paths import TrialPaths

    trial_dir = trial_dir or Path(tempfile.mkdtemp(prefix="asyncgrpo-prebuild-"))
    return DockerEnvironment(
        environment_dir=environment_dir,
        environment_name=name,
        session_id=session_id,
        trial_paths=TrialPaths(trial_dir),
        task_env_config=env_config,
    )


def harbor_build(prefix: str) -> Callable[[Target], None]:
    """The build: Harbor's own `docker compose ... build` for the task's environment (the compose files,
    CONTEXT_DIR and variables `DockerEnvironment.start` builds with), under a session named after this
    stack (`<prefix>-<task>-prebuild__env`, the trial naming sandboxes.py describes)."""

    def build(target: Target) -> None:
        # Removed once built: one folder per task image and env-server start otherwise.
        with tempfile.TemporaryDirectory(prefix="asyncgrpo-prebuild-") as trial_dir:
            env = _environment(
                target.environment_dir,
                target.names[0],
                f"{prefix}-{target.names[0]}-prebuild__env",
                target.env_config,
                Path(trial_dir),
            )
            asyncio.run(env._run_docker_compose_command(["build"]))

    return build


def install_wait(prebuilds: Prebuilds, say: Callable[[str], None]) -> None:
    """Before Harbor builds a task's image in a rollout, wait for that image's prebuild if it is running."""
    from harbor.environments.docker.docker import DockerEnvironment

    original = getattr(DockerEnvironment.start, "__wrapped__", DockerEnvironment.start)

    async def start(self: Any, force_build: bool) -> Any:
        key = self.environment_id
        if prebuilds.pending(key):
            t0 = time.monotonic()
            await prebuilds.wait(key)
            say(
                f"prebuild  rollout {self.session_id} waited {time.monotonic() - t0:.0f} s for its image's "
                f"prebuild ({prebuilds.outcomes.get(key, '?')})"
            )
        return await original(self, force_build)

    start.__wrapped__ = original  # type: ignore[attr-defined]
    DockerEnvironment.start = start


def begin(sandbox: str, datasets: Iterable[str], prefix: str, say: Callable[[str], None]) -> list[str]:
    """Startup: with SANDBOX=docker, schedule the configured tasks' images and hook the rollouts' wait.
    Returns the startup report's lines; never raises (a server without prebuilds works as before)."""
    from stack.backends import SANDBOXES

    if not SANDBOXES.get(sandbox).host_docker:
        return [f"prebuild  none: SANDBOX={sandbox} builds its sandboxes on its own side"]
    try:
        from openenv.harbor.tasks import resolve_task_dirs

        dirs = [d for spec in datasets for d in resolve_task_dirs(spec)]
        prebuilds = Prebuilds(harbor_build(prefix), say)
        install_wait(prebuilds, say)
        return prebuilds.start(targets(dirs))
    except Exception as exc:  # noqa: BLE001
        return [f"prebuild  not started ({_one_line(exc)}): each task's first rollout builds its image"]
