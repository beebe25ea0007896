"""A docker sandbox's `exec` and `cp` go to its container through plain `docker`, not `docker compose`.

Harbor 0.25.0's DockerEnvironment runs every sandbox operation through `_run_docker_compose_command`
(harbor/environments/docker/docker.py): `build`, `up` and `down`, and also every `exec` (the agent's set-up
and run, the verifier, each `chown` of `prepare_logs_for_host`) and every `cp` (docker_unix.py's uploads and
downloads). Each of those starts the compose CLI, which reads and interpolates the trial's four or five
compose files and lists the project's containers before it does the one thing asked. env-server was the
largest share of the learning gate's CPU (523 of 1,913 CPU-s on 2 cores, about 15 compose calls a trial), and
`benchmarks/sandbox_calls.py` measures a `compose exec` against a `docker exec` on the same container.

`install()` wraps that one method: an `exec` or `cp` aimed at the main service goes to `docker exec` /
`docker cp` with the same flags, on the container compose started for it (found once per sandbox by compose's
own labels, as docker_unix.py's engine-cp fallback finds it); everything else (build, up, down, config,
sidecar services, a flag this module does not know) goes to compose as before. Harbor's own output
collection, timeouts and error handling run unchanged on either. E2B sandboxes never reach this method.

One compose call a trial is not needed at all and is skipped (`skipped`): the `down` before a new session's
first `up`. Each trial's `trial.log` says what went where. (A trial's builds are sandbox_stop.py's part: `up`
no longer builds the image Harbor's `build` has just built.)
"""

from __future__ import annotations

import asyncio
from typing import Any

MAIN = "main"  # harbor.environments.docker.MAIN_SERVICE_NAME
_UP_TRIED_ATTR = "_asyncgrpo_up_tried"
# Verbs after which the main service's container may be another one (or none): resolve it again.
_CHANGES_CONTAINER = frozenset({"up", "down", "stop", "start", "restart", "rm", "kill", "create"})
# `compose exec` flags Harbor passes that `docker exec` spells the same, each with one value.
_EXEC_FLAGS_WITH_VALUE = frozenset({"-w", "-e", "-u"})
_CONTAINER_ATTR = "_asyncgrpo_main_container"


def engine_args(command: list[str], container: str, stdin: bool) -> list[str] | None:
    """`docker` arguments doing what compose `command` does on the main service's `container`; None for
    anything else, which then runs through compose unchanged."""
    if not command:
        return None
    verb, rest = command[0], command[1:]
    if verb == "exec":
        flags: list[str] = ["-i"] if stdin else []
        i = 0
        while i < len(rest) and rest[i].startswith("-"):
            if rest[i] == "-T":  # compose's "no TTY"; `docker exec` allocates none unless -t
                i += 1
            elif rest[i] in _EXEC_FLAGS_WITH_VALUE and i + 1 < len(rest):
                flags += rest[i : i + 2]
                i += 2
            else:
                return None
        if i >= len(rest) or rest[i] != MAIN or i + 1 >= len(rest):
            return None
        return ["exec", *flags, container, *rest[i + 1 :]]
    if verb == "cp" and len(rest) == 2:
        src, dst = rest
        # Harbor passes the host side as an absolute path (docker_unix.py `_compose_host_path`), so a colon
        # in it never names a container for `docker cp`.
        if src.startswith(f"{MAIN}:") and dst.startswith("/"):
            return ["cp", f"{container}:{src[len(MAIN) + 1 :]}", dst]
        if dst.startswith(f"{MAIN}:") and src.startswith("/"):
            return ["cp", src, f"{container}:{dst[len(MAIN) + 1 :]}"]
    return None


async def _main_container(env: Any) -> str | None:
    """The main service's running container, cached on the environment until a verb that changes it."""
    cached = getattr(env, _CONTAINER_ATTR, None)
    if cached:
        return cached
    try:
        container = await env._platform._resolve_service_container(MAIN)
    except (RuntimeError, AttributeError):
        return None  # not up yet, or a platform without the lookup: compose answers this one
    setattr(env, _CONTAINER_ATTR, container)
    env.logger.debug(f"sandbox calls: exec and cp go to container {container} through docker, not compose")
    return container


def skipped(env: Any, command: list[str]) -> str | None:
    """Why Harbor's `command` need not run at all for `env`, or None: the `down --remove-orphans` before the
    environment's first `up`. Harbor clears what an earlier run under the same session id left, and OpenEnv
    names every rollout's session afresh (`<stack>--<task>-<hex8>`); what a killed server left is reaped at
    start (sandboxes.py). A start that got as far as `up` and is tried again still runs it."""
    if command == ["down", "--remove-orphans"] and not getattr(env, _UP_TRIED_ATTR, False):
        return "a new session id has nothing to remove"
    return None


def install() -> str:
    """Wrap DockerEnvironment._run_docker_compose_command (idempotent). Returns the startup report's line."""
    from harbor.environments.docker.docker import DockerEnvironment

    original = getattr(
        DockerEnvironment._run_docker_compose_command, "__wrapped__", DockerEnvironment._run_docker_compose_command
    )

    async def run(
        self: Any,
        command: list[str],
        check: bool = True,
        timeout_sec: int | None = None,
        stdin_data: bytes | None = None,
        on_output: Any = None,
    ) -> Any:
        if command and command[0] in _CHANGES_CONTAINER:
            setattr(self, _CONTAINER_ATTR, None)
        if command and command[0] == "up":
            setattr(self, _UP_TRIED_ATTR, True)
        why = skipped(self, command)
        if why:
            from harbor.environments.base import ExecResult

            self.logger.debug(f"sandbox calls: compose {command[0]} skipped: {why}")
            return ExecResult(stdout="", stderr=None, return_code=0)
        container = await _main_container(self) if command and command[0] in ("exec", "cp") else None
        args = engine_args(command, container, stdin_data is not None) if container else None
        if args is None:
            return await original(self, command, check, timeout_sec, stdin_data, on_output)
        full = type(self)._engine_cmd(*args)
        process = await asyncio.create_subprocess_exec(
            *full,
            env=self._compose_env_vars(include_os_env=True),
            stdin=asyncio.subprocess.PIPE if stdin_data is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        if on_output is not None:
            result = await self._collect_streamed_output(
                process, timeout_sec=timeout_sec, stdin_data=stdin_data, on_output=on_output
            )
        else:
            result = await self._collect_buffered_output(process, timeout_sec=timeout_sec, stdin_data=stdin_data)
        if check and result.return_code != 0:
            # Harbor's own message shape, so its callers' fallbacks (cp -> tar upload) read it the same.
            raise RuntimeError(
                f"Docker command failed for environment {self.environment_name}. Command: {' '.join(full)}. "
                f"Return code: {result.return_code}. Stdout: {result.stdout}. Stderr: {result.stderr}. "
            )
        return result

    run.__wrapped__ = original  # type: ignore[attr-defined]
    DockerEnvironment._run_docker_compose_command = run
    return "sandbox   exec and cp: `docker` on the sandbox's container (build, up and down: `docker compose`)"
