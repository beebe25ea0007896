"""Sandboxes carry their stack's name, and a starting env server reaps the ones an earlier run left.

After an OOM kill, a `docker kill` or a reboot of env-server, its sandboxes keep running (docker) or
billing (E2B): nothing closed them. Harbor names every sandbox after its trial, and OpenEnv 0.10.0 builds
the trial name as `<session_prefix>-<task>-<hex8>` (openenv/harbor/rollout.py `run_rollout`, where
`session_prefix` defaults to "oe" and the environment passes none). `install_prefix` makes that prefix
this stack's (`STACK_NAME`, default the compose project name, as `<stack>-`), so:

  docker  each sandbox is a compose project `<stack>--<task>-<hex8>__env` (harbor/environments/docker/
          docker.py `_sanitize_docker_compose_project_name(session_id)`), visible as the containers'
          `com.docker.compose.project` label;
  e2b     each sandbox's metadata `session_id` is `<stack>--<task>-<hex8>__env` (harbor/environments/e2b.py
          `_create_sandbox`).

At start nothing of this stack can be running yet (rollouts are admitted only after the server is up),
so every sandbox under the prefix is a leftover, and `reap` removes it, reporting the count.
"""

from __future__ import annotations

import functools
import re
import subprocess
from typing import Any

from stack import backends, mountinfo

PROJECT_LABEL = "com.docker.compose.project"


def trial_prefix(stack: str) -> str:
    """`<stack>-`: lowercase [a-z0-9-] (Harbor's compose-project sanitising keeps it as is), no "--" inside,
    so the trial name's "<prefix>-" ("<stack>--") ends the stack unambiguously: stack "a" never claims
    the sandboxes of stack "a-b" ("a-b--...")."""
    cleaned = re.sub(r"[^a-z0-9]+", "-", stack.lower()).strip("-")
    return (cleaned or "asyncgrpo-harbor")[:32].strip("-") + "-"


def ours(name: str, prefix: str) -> bool:
    return name.startswith(prefix + "-")


def install_prefix(prefix: str) -> None:
    """Every rollout's trial (and so its sandbox) is named under `prefix`."""
    from openenv.harbor import rollout

    original = getattr(rollout.run_rollout, "__wrapped__", rollout.run_rollout)

    @functools.wraps(original)
    async def run_rollout(*args: Any, **kwargs: Any) -> Any:
        kwargs["session_prefix"] = prefix
        return await original(*args, **kwargs)

    # OpenEnv's environment imports `run_rollout` from this module at call time, so the rebinding holds.
    rollout.run_rollout = run_rollout


def _docker(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=120)


def reap_docker(prefix: str) -> tuple[int, list[str]]:
    """Remove the containers and networks of every compose project under `prefix`.

    Returns (how many sandboxes, problems)."""
    label = '{{.ID}} {{.Label "' + PROJECT_LABEL + '"}}'
    listed = _docker("ps", "-a", "--filter", f"label={PROJECT_LABEL}", "--format", label)
    if listed.returncode != 0:
        return 0, [f"docker ps failed: {listed.stderr.strip()[:200]}"]
    projects: dict[str, list[str]] = {}
    for line in listed.stdout.splitlines():
        container, _, project = line.partition(" ")
        if ours(project, prefix):
            projects.setdefault(project, []).append(container)
    problems = []
    for project, ids in sorted(projects.items()):
        gone = _docker("rm", "-f", "-v", *ids)
        if gone.returncode != 0:
            problems.append(f"{project}: {gone.stderr.strip()[:200]}")
    networks = _docker("network", "ls", "--filter", f"label={PROJECT_LABEL}", "--format", label)
    for line in networks.stdout.splitlines():
        net_id, _, project = line.partition(" ")
        if ours(project, prefix):
            _docker("network", "rm", net_id)
    return len(projects), problems


def reap_e2b(prefix: str) -> tuple[int, list[str]]:
    """Kill every E2B sandbox of this account whose Harbor session id is under `prefix`."""
    from e2b import Sandbox

    killed, problems = 0, []
    pages = Sandbox.list()
    while pages.has_next:
        for info in pages.next_items():
            if ours((info.metadata or {}).get("session_id", ""), prefix):
                try:
                    Sandbox.kill(info.sandbox_id)
                    killed += 1
                except Exception as exc:  # noqa: BLE001 - one sandbox that will not die is reported, not fatal
                    problems.append(f"{info.sandbox_id}: {type(exc).__name__}: {exc}")
    return killed, problems


def stack_name(configured: str, sandbox: str) -> str:
    """STACK_NAME, else (docker) this container's own compose project, else the default project name."""
    if configured:
        return configured
    container = own_container_id()
    if backends.SANDBOXES.get(sandbox).host_docker and container:
        me = _docker("inspect", container, "--format", '{{index .Config.Labels "' + PROJECT_LABEL + '"}}')
        if me.returncode == 0 and me.stdout.strip() not in ("", "<no value>"):
            return me.stdout.strip()
    return "asyncgrpo-harbor"


def own_container_id(text: str | None = None) -> str:
    """This container's id (stack.mountinfo.container_id), from `text` or /proc/self/mountinfo."""
    try:
        mounts = mountinfo.parse(text) if text is not None else mountinfo.read()
    except OSError:
        return ""
    return mountinfo.container_id(mounts)


def reap(sandbox: str, prefix: str) -> str:
    """Reap this stack's leftover sandboxes with the backend's own reaper (stack/backends.py); returns the
    startup report line. Never fatal."""
    backend = backends.SANDBOXES.get(sandbox)
    if not backend.reaper:
        return f"reaped    nothing: the {sandbox} backend names no reaper, so earlier sandboxes were not looked for"
    try:
        count, problems = backends.load(backend.reaper)(prefix)
    except Exception as exc:  # noqa: BLE001 - the server still starts; the line says what was not checked
        return f"reaped    could not list earlier {sandbox} sandboxes ({type(exc).__name__}: {str(exc)[:160]})"
    line = f"reaped    {count} {sandbox} sandbox(es) an earlier run of stack '{prefix}' left behind"
    if problems:
        line += f"; {len(problems)} would not go: {'; '.join(problems[:3])}"
    return line
