"""The env server's configuration, read once from the environment (compose.yaml sets every name).

Every bad value is one `ConfigError` line that names the variable and the fix, so `docker compose
logs env-server` says what to change instead of showing a traceback.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

SANDBOXES = ("e2b", "docker")
AGENT_INSTALLS = ("online", "preinstalled", "wheelhouse")
DEFAULT_DATASET = "/app/datasets/starter"


class ConfigError(Exception):
    """A setting the server cannot start with. `str(exc)` is the one line an operator reads."""


@dataclass(frozen=True)
class Settings:
    env_server_host: str = "127.0.0.1"
    env_server_port: int = 8000
    capture_host: str = "127.0.0.1"
    capture_port: int = 8100
    engine_url: str = "http://127.0.0.1:8001/v1"
    model: str = ""
    datasets: tuple[str, ...] = (DEFAULT_DATASET,)
    sandbox: str = "e2b"
    # Whether a key is present; the key itself is never held here, so no report can print it.
    e2b_key_set: bool = False
    admin_key_set: bool = False
    max_output_tokens: int = 4096
    max_concurrent_envs: int = 16
    max_inflight_rollouts: int = 8
    tunnel_provider: str = "cloudflared"
    agent_install: str = "online"
    wheelhouse_dir: str = "/wheelhouse"
    trials_dir: str = "/var/lib/asyncgrpo-harbor/trials"
    handoff_dir: str = "/handoff"
    # Under compose's stop_grace_period (90s), so sandboxes are closed before Docker's SIGKILL.
    shutdown_grace_s: float = 75.0
    # Lines the operator should see (a value we changed and why); printed in the startup report.
    notes: tuple[str, ...] = field(default_factory=tuple)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        notes: list[str] = []

        def text(name: str, default: str) -> str:
            return (env.get(name) or "").strip() or default

        def integer(name: str, default: int, minimum: int = 0) -> int:
            raw = text(name, str(default))
            try:
                value = int(raw)
            except ValueError:
                raise ConfigError(
                    f"{name}={raw!r} is not a whole number; set {name} in .env (default {default})"
                ) from None
            if value < minimum:
                raise ConfigError(f"{name}={value} must be >= {minimum}; fix {name} in .env")
            return value

        sandbox = text("SANDBOX", "e2b").lower()
        if sandbox not in SANDBOXES:
            raise ConfigError(
                f"SANDBOX={sandbox!r} is not supported here; set SANDBOX to one of {', '.join(SANDBOXES)}"
            )
        agent_install = text("AGENT_INSTALL", "online").lower()
        if agent_install not in AGENT_INSTALLS:
            raise ConfigError(
                f"AGENT_INSTALL={agent_install!r} is unknown; set it to one of {', '.join(AGENT_INSTALLS)}"
            )
        datasets = tuple(d.strip() for d in text("DATASETS", DEFAULT_DATASET).split(",") if d.strip())
        # Held-out datasets are served from the same process (shared sandbox templates); the trainer
        # keeps them out of training (trainer/task_select.py).
        for spec in (d.strip() for d in text("EVAL_DATASETS", "").split(",")):
            if spec and spec not in datasets:
                datasets += (spec,)

        max_inflight = integer("MAX_INFLIGHT_ROLLOUTS", 8, minimum=1)
        max_envs = integer("MAX_CONCURRENT_ENVS", 16, minimum=1)
        if max_envs < max_inflight:
            # Each in-flight rollout holds one MCP session for its whole run; with fewer sessions than
            # rollouts the surplus is refused by OpenEnv's session cap, and the trainer sees failures.
            notes.append(
                f"MAX_CONCURRENT_ENVS raised from {max_envs} to {max_inflight} to cover "
                f"MAX_INFLIGHT_ROLLOUTS={max_inflight} (set MAX_CONCURRENT_ENVS >= MAX_INFLIGHT_ROLLOUTS in .env)"
            )
            max_envs = max_inflight

        grace_raw = text("SHUTDOWN_GRACE_S", "75")
        try:
            grace = float(grace_raw)
        except ValueError:
            raise ConfigError(f"SHUTDOWN_GRACE_S={grace_raw!r} is not a number of seconds") from None

        return cls(
            env_server_host=text("ENV_SERVER_HOST", "127.0.0.1"),
            env_server_port=integer("ENV_SERVER_PORT", 8000, minimum=1),
            capture_host=text("CAPTURE_HOST", "127.0.0.1"),
            capture_port=integer("CAPTURE_PORT", 8100, minimum=1),
            engine_url=text("ENGINE_URL", "http://127.0.0.1:8001/v1").rstrip("/"),
            model=text("MODEL", ""),
            datasets=datasets or (DEFAULT_DATASET,),
            sandbox=sandbox,
            e2b_key_set=bool(text("E2B_API_KEY", "")),
            admin_key_set=bool(text("OPENENV_CAPTURE_ADMIN_KEY", "")),
            max_output_tokens=integer("MAX_OUTPUT_TOKENS", 4096, minimum=0),
            max_concurrent_envs=max_envs,
            max_inflight_rollouts=max_inflight,
            tunnel_provider=text("TUNNEL_PROVIDER", "cloudflared"),
            agent_install=agent_install,
            wheelhouse_dir=text("WHEELHOUSE_DIR", "/wheelhouse"),
            trials_dir=text("TRIALS_DIR", "/var/lib/asyncgrpo-harbor/trials"),
            handoff_dir=text("HANDOFF_DIR", "/handoff"),
            shutdown_grace_s=grace,
            notes=tuple(notes),
        )
