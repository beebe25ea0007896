"""The env server's configuration, read once from the environment (compose.yaml sets every name).

Every bad value is one `ConfigError` line that names the variable and the fix, so `docker compose
logs env-server` says what to change instead of showing a traceback.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from stack.endpoints import DEFAULT_ENGINE_URL, read_engine_url
from stack.env import Env, EnvError
from stack.facts import (
    AGENT_INSTALLS,
    DEFAULT_DATASET,
    DEFAULT_PORTS,
    DEFAULT_SANDBOX,
    DEFAULT_TUNNEL_PROVIDER,
    HANDOFF_DIR,
    SANDBOXES,
    TUNNEL_PROVIDER_ALIASES,
    TUNNEL_PROVIDERS,
)

from .task_env import allow_list

# Addresses that mean "every interface": the capture proxy is the one public surface and must be bound
# to one interface on purpose (loopback behind a tunnel, or the address the sandboxes route to).
WILDCARD_HOSTS = ("0.0.0.0", "::", "[::]", "*", "")
# Local docker sandboxes run a task's Dockerfile and compose file on this host's daemon (the mounted
# socket is root on the host): only tasks from a local folder the operator put there, unless this phrase.
REMOTE_TASKS_OK_PHRASE = "i-trust-these-tasks-with-this-host"

ConfigError = EnvError


@dataclass(frozen=True)
class Settings:
    env_server_host: str = "127.0.0.1"
    env_server_port: int = 8000
    capture_host: str = "127.0.0.1"
    capture_port: int = 8100
    engine_url: str = DEFAULT_ENGINE_URL  # the root; stack.endpoints.openai_base adds /v1
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
    # Finished trial folders kept (trials.py): the newest this many, within this many GB (0: no size cap).
    trials_keep: int = 1000
    trials_max_gb: float = 10.0
    handoff_dir: str = HANDOFF_DIR
    # Under compose's stop_grace_period (90s), so sandboxes are closed before Docker's SIGKILL.
    shutdown_grace_s: float = 75.0
    # The public front (front.py). A full 32k-token context is ~150 KB of JSON; 8 MB is generous.
    capture_max_body_mb: int = 8
    capture_max_concurrent: int = 64
    # Host variables a task's task.toml `${VAR}` may read (task_env.py); empty: none.
    task_env_allow: tuple[str, ...] = ()
    direct_url: str = ""
    remote_tasks_ok: bool = False
    # Names this stack's sandboxes (sandboxes.py); empty: the compose project (docker) or "asyncgrpo-harbor".
    stack_name: str = ""
    # Lines the operator should see (a value we changed and why); printed in the startup report.
    notes: tuple[str, ...] = field(default_factory=tuple)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        read = Env(env, collect=True)
        notes: list[str] = []
        sandbox = read.choice(
            "SANDBOX",
            DEFAULT_SANDBOX,
            SANDBOXES,
            fix="set SANDBOX to e2b (production) or docker (local sandboxes)",
        )
        agent_install = read.choice("AGENT_INSTALL", "online", AGENT_INSTALLS)
        datasets = tuple(d.strip() for d in read.text("DATASETS", DEFAULT_DATASET).split(",") if d.strip())

        # Held-out datasets are served from the same process (shared sandbox templates); the trainer
        # keeps them out of training (trainer/task_select.py).
        for spec in (d.strip() for d in read.text("EVAL_DATASETS").split(",")):
            if spec and spec not in datasets:
                datasets += (spec,)

        max_inflight = read.integer("MAX_INFLIGHT_ROLLOUTS", 8, minimum=1)
        max_envs = read.integer("MAX_CONCURRENT_ENVS", 16, minimum=1)
        if max_envs < max_inflight:
            # Each in-flight rollout holds one MCP session for its whole run; with fewer sessions than
            # rollouts the surplus is refused by OpenEnv's session cap, and the trainer sees failures.
            notes.append(
                f"MAX_CONCURRENT_ENVS raised from {max_envs} to {max_inflight} to cover "
                f"MAX_INFLIGHT_ROLLOUTS={max_inflight} (set MAX_CONCURRENT_ENVS >= MAX_INFLIGHT_ROLLOUTS in .env)"
            )
            max_envs = max_inflight

        capture_host = read.text("CAPTURE_HOST", "127.0.0.1")
        if capture_host in WILDCARD_HOSTS:
            raise ConfigError(
                f"CAPTURE_HOST={capture_host!r} would publish the capture proxy on every interface: set it to "
                "127.0.0.1 (behind a tunnel) or to the one address the sandboxes route to (TUNNEL_PROVIDER=direct)"
            )
        tunnel_provider = read.choice(
            "TUNNEL_PROVIDER", DEFAULT_TUNNEL_PROVIDER, TUNNEL_PROVIDERS, aliases=TUNNEL_PROVIDER_ALIASES
        )
        direct_url = read.url("DIRECT_URL", fix="set DIRECT_URL with its scheme, e.g. https://capture.example.com")
        if tunnel_provider == "direct" and sandbox == "e2b" and direct_url.lower().startswith("http://"):
            raise ConfigError(
                f"DIRECT_URL={direct_url} is plain http but SANDBOX=e2b sandboxes reach it across the internet, "
                "where each sandbox's session key would travel in clear text: put TLS in front of the capture "
                "port and use an https:// DIRECT_URL, or use TUNNEL_PROVIDER=cloudflared"
            )
        # The raw value: the reader strips, and a line break inside is one of the refusals.
        task_env_allow = allow_list(read.env.get("TASK_ENV_ALLOW") or "")
        remote_ok = read.text("SANDBOX_DOCKER_REMOTE_TASKS_OK")
        if remote_ok and remote_ok != REMOTE_TASKS_OK_PHRASE:
            raise ConfigError(
                f"SANDBOX_DOCKER_REMOTE_TASKS_OK={remote_ok!r} is not the opt-out phrase: set it to exactly "
                f"{REMOTE_TASKS_OK_PHRASE}, or leave it empty"
            )

        settings = cls(
            env_server_host=read.text("ENV_SERVER_HOST", "127.0.0.1"),
            env_server_port=read.port("ENV_SERVER_PORT", DEFAULT_PORTS["ENV_SERVER_PORT"]),
            capture_host=capture_host,
            capture_port=read.port("CAPTURE_PORT", DEFAULT_PORTS["CAPTURE_PORT"]),
            engine_url=read_engine_url(read),
            model=read.text("MODEL"),
            datasets=datasets or (DEFAULT_DATASET,),
            sandbox=sandbox,
            e2b_key_set=bool(read.text("E2B_API_KEY")),
            admin_key_set=bool(read.text("OPENENV_CAPTURE_ADMIN_KEY")),
            max_output_tokens=read.integer("MAX_OUTPUT_TOKENS", 4096, minimum=0),
            max_concurrent_envs=max_envs,
            max_inflight_rollouts=max_inflight,
            tunnel_provider=tunnel_provider,
            agent_install=agent_install,
            wheelhouse_dir=read.path("WHEELHOUSE_DIR", "/wheelhouse"),
            trials_dir=read.path("TRIALS_DIR", "/var/lib/asyncgrpo-harbor/trials"),
            trials_keep=read.integer("TRIALS_KEEP", 1000, minimum=1, maximum=1_000_000),
            trials_max_gb=read.number("TRIALS_MAX_GB", 10.0, minimum=0, maximum=100_000),
            handoff_dir=read.path("HANDOFF_DIR", HANDOFF_DIR),
            shutdown_grace_s=read.number("SHUTDOWN_GRACE_S", 75.0, minimum=0),
            capture_max_body_mb=read.integer("CAPTURE_MAX_BODY_MB", 8, minimum=1),
            capture_max_concurrent=read.integer("CAPTURE_MAX_CONCURRENT", 64, minimum=1),
            task_env_allow=task_env_allow,
            direct_url=direct_url,
            remote_tasks_ok=bool(remote_ok),
            stack_name=read.text("STACK_NAME"),
            notes=tuple(notes),
        )
        read.check()
        return settings
