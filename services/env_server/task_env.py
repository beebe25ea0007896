"""What a task may read from env-server's environment: only the variables on TASK_ENV_ALLOW.

Harbor 0.25.0 fills `${VAR}` / `${VAR:-default}` in a task's task.toml env tables (`[environment].env`,
`[verifier].env`, `[solution].env`) from the host process's `os.environ`, through
`harbor.utils.env.resolve_env_vars`, which each user imports by name (harbor/environments/base.py
`_startup_env` and `_maybe_resolve_task_env`, harbor/environments/docker/docker.py for compose tasks,
harbor/verifier/verifier.py, harbor/agents/oracle.py, and the other sandbox backends). env-server's
environment holds E2B_API_KEY and may hold HF_TOKEN, so a task from an untrusted dataset could write
`E2B_API_KEY = "${E2B_API_KEY}"` and read the key inside its sandbox. The local docker backend also runs
`docker compose` with the whole `os.environ` (docker.py `_compose_env_vars` -> `merge_compose_env`),
where a task's own docker-compose.yaml can interpolate any of it.

`install()` rebinds `resolve_env_vars` in every loaded harbor module (and at its source, for modules
imported later) to a resolver that sees only the allow-listed names: a template naming any other
variable reads as unset (its default, or Harbor's own "not found" error, which fails that rollout
with a line naming TASK_ENV_ALLOW), and compose gets the process variables it needs to run plus the
allow-list.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from collections.abc import Callable, Mapping

# Harbor's own pattern (harbor/utils/env.py `_TEMPLATE_PATTERN`): the whole value is one template.
_TEMPLATE = re.compile(r"\$\{([^}:]+)(?::-(.*))?\}")
# Where Harbor resolves task env tables; imported here so they are rebound before any rollout.
RESOLVING_MODULES = (
    "harbor.utils.env",
    "harbor.environments.base",
    "harbor.environments.docker.docker",
    "harbor.environments.e2b",
    "harbor.verifier.verifier",
    "harbor.agents.oracle",
    "harbor.trial.trial",
)
# What `docker compose` itself needs from the process environment to find the daemon and its config.
COMPOSE_PROCESS_VARS = (
    "PATH",
    "HOME",
    "USER",
    "LANG",
    "LC_ALL",
    "TMPDIR",
    "XDG_RUNTIME_DIR",
    "XDG_CONFIG_HOME",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
)
COMPOSE_PROCESS_PREFIXES = ("DOCKER_", "COMPOSE_", "BUILDKIT_")


def make_resolver(allowed: frozenset[str], environ: Mapping[str, str] = os.environ) -> Callable:
    def resolve_env_vars(env_dict: dict[str, str]) -> dict[str, str]:
        resolved: dict[str, str] = {}
        for key, value in env_dict.items():
            match = _TEMPLATE.fullmatch(value)
            if not match:
                resolved[key] = value
                continue
            name, default = match.group(1), match.group(2)
            if name in allowed and name in environ:
                resolved[key] = environ[name]
            elif default is not None:
                resolved[key] = default
            elif name in allowed:
                raise ValueError(f"Environment variable '{name}' not found in host environment")
            else:
                raise ValueError(
                    f"task.toml asks for host variable '{name}' (for {key}), which is not on TASK_ENV_ALLOW: "
                    "env-server gives tasks only the variables listed there"
                )
        return resolved

    return resolve_env_vars


def compose_base_env(allowed: frozenset[str], environ: Mapping[str, str]) -> dict[str, str]:
    return {
        k: v
        for k, v in environ.items()
        if k in allowed or k in COMPOSE_PROCESS_VARS or k.startswith(COMPOSE_PROCESS_PREFIXES)
    }


def install(allowed: tuple[str, ...]) -> str:
    """Confine every harbor resolver to `allowed`; returns the startup report line."""
    allow = frozenset(allowed)
    resolver = make_resolver(allow)
    for name in RESOLVING_MODULES:
        importlib.import_module(name)
    for name, module in list(sys.modules.items()):
        if (name == "harbor" or name.startswith("harbor.")) and hasattr(module, "resolve_env_vars"):
            module.resolve_env_vars = resolver

    docker = sys.modules["harbor.environments.docker.docker"]
    merge = docker.merge_compose_env

    def merge_compose_env(*, base_env=None, **kwargs):
        return merge(base_env=None if base_env is None else compose_base_env(allow, base_env), **kwargs)

    if not getattr(merge, "confined", False):
        merge_compose_env.confined = True  # type: ignore[attr-defined]
        docker.merge_compose_env = merge_compose_env
    listed = ", ".join(sorted(allow)) or "none"
    return f"task env  tasks may read these env-server variables through ${{VAR}}: {listed} (TASK_ENV_ALLOW)"
