"""The env server's configuration, read once from the environment through its field table (FIELDS).

Every bad value is one `EnvError` line that names the variable and the fix, so `docker compose
logs env-server` says what to change instead of showing a traceback.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, make_dataclass

from stack import fields, names
from stack.backends import SANDBOXES, TUNNEL_PROVIDERS
from stack.endpoints import read_engine_url
from stack.env import Env, EnvError, Field, Table
from stack.facts import CAPTURE_HOST_OPT_OUT_PHRASE, LOOPBACK_HOSTS, SANDBOX_BRIDGE_HOST

from .task_env_allow import allow_list

# Addresses that mean "every interface": the capture proxy is the one public surface and must be bound
# to one interface on purpose (loopback behind a tunnel, or the address the sandboxes route to).
WILDCARD_HOSTS = ("0.0.0.0", "::", "[::]", "*", "")
# Local docker sandboxes run a task's Dockerfile and compose file on this host's daemon (the mounted
# socket is root on the host): only tasks from a local folder the operator put there, unless this phrase.
REMOTE_TASKS_OK_PHRASE = "i-trust-these-tasks-with-this-host"


F = fields
FIELDS = Table(
    Field("ENV_SERVER_HOST", "text", "127.0.0.1", "address the Task API binds"),
    F.ENV_SERVER_PORT,
    F.CAPTURE_HOST,
    F.CAPTURE_HOST_BEYOND_TUNNEL_OK,
    F.CAPTURE_PORT,
    F.ENGINE_URL,
    F.MODEL,
    F.DATASETS,
    F.EVAL_DATASETS,
    F.TASK_INSTRUCTION_MAX_CHARS,
    F.DATASET_BAD_TASKS,
    F.SANDBOX,
    F.E2B_API_KEY,
    Field(
        "OPENENV_CAPTURE_ADMIN_KEY",
        "text",
        "",
        "key for the capture proxy's management routes; empty: a random one per start",
        secret=True,
    ),
    F.MAX_OUTPUT_TOKENS,
    Field(
        "MAX_CONCURRENT_ENVS",
        "integer",
        16,
        "sandboxes the env server runs at once; raised to MAX_INFLIGHT_ROLLOUTS when below it",
        minimum=1,
        maximum=1024,  # MAX_INFLIGHT_ROLLOUTS' bound: one sandbox per rollout in flight
    ),
    F.MAX_INFLIGHT_ROLLOUTS,
    F.TUNNEL_PROVIDER,
    F.AGENT_INSTALL,
    Field("WHEELHOUSE_DIR", "path", "/wheelhouse", "AGENT_INSTALL=wheelhouse: the wheels' folder in the container"),
    Field("TRIALS_DIR", "path", "/var/lib/asyncgrpo-harbor/trials", "Harbor trial folders (same path on the host)"),
    Field("TRIALS_KEEP", "integer", 1000, "finished trial folders kept (the newest)", minimum=1, maximum=1_000_000),
    Field(
        "TRIALS_MAX_GB",
        "number",
        10.0,
        "finished trial folders kept within this many GB; 0: no size cap",
        minimum=0,
        maximum=100_000,
    ),
    F.HANDOFF_DIR,
    # Under compose's stop_grace_period (90s), so sandboxes are closed before Docker's SIGKILL. Closing a sandbox
    # takes seconds; an hour is past any stop grace an operator gives a container.
    Field(
        "ENV_SERVER_SHUTDOWN_GRACE_S",
        "number",
        75.0,
        "seconds spent closing in-flight sandboxes on stop; below ENV_SERVER_STOP_GRACE",
        minimum=0,
        maximum=3600,
    ),
    # A full 32k-token context is ~150 KB of JSON; 8 MB is generous.
    # The upper bounds are the Helm chart's (values.schema.json; tests/unit/test_settings_tables.py keeps
    # them equal): the public port must not buffer gigabytes per request, nor hold thousands of calls.
    Field(
        "CAPTURE_MAX_BODY_MB",
        "integer",
        8,
        "largest request body a sandbox may send, in MB (1-64)",
        fix="set it in 1-64 (a full 32k-token context is ~150 KB of JSON; each request's body is held in memory)",
        minimum=1,
        maximum=64,
    ),
    Field(
        "CAPTURE_MAX_CONCURRENT",
        "integer",
        64,
        "model calls served at once on the capture port (1-1024)",
        fix="set it in 1-1024 (one call per in-flight rollout is enough: MAX_INFLIGHT_ROLLOUTS)",
        minimum=1,
        maximum=1024,
    ),
    Field("TASK_ENV_ALLOW", "words", (), "host variables a task's task.toml may read; empty: none"),
    F.DIRECT_URL,
    Field(
        "SANDBOX_DOCKER_REMOTE_TASKS_OK",
        "phrase",
        "",
        "SANDBOX=docker: the opt-out for tasks that are not local folders",
        fix=f"set it to exactly {REMOTE_TASKS_OK_PHRASE}, or leave it empty",
        choices=(REMOTE_TASKS_OK_PHRASE,),
    ),
    F.STACK_NAME,
)


# How the table's rows are held (Table.attributes): each as its lowercased name, but for these. The keys are held
# only as whether they are set, so no report can print one.
RENAMED = {
    "E2B_API_KEY": "credentials_set",
    "OPENENV_CAPTURE_ADMIN_KEY": "admin_key_set",
    "ENV_SERVER_SHUTDOWN_GRACE_S": "shutdown_grace_s",
    "SANDBOX_DOCKER_REMOTE_TASKS_OK": "remote_tasks_ok",
}
# Not held: EVAL_DATASETS (served as part of `datasets`) and the opt-out only a rule reads.
APART = ("EVAL_DATASETS", "CAPTURE_HOST_BEYOND_TUNNEL_OK")


@dataclass(frozen=True)
class Settings(make_dataclass("TableSettings", FIELDS.attributes(RENAMED, APART), frozen=True)):
    """One attribute per row of FIELDS (RENAMED, APART), and what the reader derives. Of note: `engine_url` is the
    root (stack.endpoints.openai_base adds /v1); `task_instruction_max_chars` and `dataset_bad_tasks` are the
    dataset check's (stack/datasets.py); `trials_keep` and `trials_max_gb` bound the finished trial folders
    (trials.py; 0 GB: no size cap); `capture_max_*` are the public front's (front.py); `task_env_allow` the host
    variables a task's task.toml `${VAR}` may read (task_env.py; empty: none); `stack_name` names this stack's
    sandboxes (sandboxes.py; empty: the compose project (docker) or "asyncgrpo-harbor")."""

    # Rows held as something other than their value (RENAMED): their defaults, in their rows' places.
    credentials_set: tuple[str, ...] = ()  # which of the backend's credentials are set
    admin_key_set: bool = False
    remote_tasks_ok: bool = False
    # Lines the operator should see (a value we changed and why); printed in the startup report.
    notes: tuple[str, ...] = field(default_factory=tuple)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        read = Env(env, collect=True)

        def get(name: str):
            return read.get(FIELDS[name])

        notes: list[str] = []
        sandbox = get("SANDBOX")
        agent_install = get("AGENT_INSTALL")
        datasets = get("DATASETS")

        # Held-out datasets are served from the same process (shared sandbox templates); the trainer
        # keeps them out of training (trainer/rollouts/task_select.py).
        for spec in get("EVAL_DATASETS"):
            if spec not in datasets:
                datasets += (spec,)

        max_inflight = get("MAX_INFLIGHT_ROLLOUTS")
        max_envs = get("MAX_CONCURRENT_ENVS")
        if max_envs < max_inflight:
            # Each in-flight rollout holds one MCP session for its whole run; with fewer sessions than
            # rollouts the surplus is refused by OpenEnv's session cap, and the trainer sees failures.
            notes.append(
                f"MAX_CONCURRENT_ENVS raised from {max_envs} to {max_inflight} to cover "
                f"MAX_INFLIGHT_ROLLOUTS={max_inflight} (set MAX_CONCURRENT_ENVS >= MAX_INFLIGHT_ROLLOUTS in .env)"
            )
            max_envs = max_inflight

        capture_max_concurrent = get("CAPTURE_MAX_CONCURRENT")
        if max_inflight > capture_max_concurrent:
            # Each in-flight rollout makes one model call at a time through the capture port; past its cap the
            # surplus gets 429s (front.py) while each holds a paid sandbox.
            read.refuse(
                f"MAX_INFLIGHT_ROLLOUTS={max_inflight} is above CAPTURE_MAX_CONCURRENT={capture_max_concurrent}, the "
                "model calls the capture proxy admits at once, so the surplus rollouts would wait on 429s holding "
                f"their sandboxes: raise CAPTURE_MAX_CONCURRENT to at least {max_inflight}, or lower "
                "MAX_INFLIGHT_ROLLOUTS",
                None,
            )

        # Each refusal below is recorded and the read goes on (with the field's default in its place), so one
        # start, and preflight, names every bad setting at once rather than the first of them.
        capture_host = get("CAPTURE_HOST")
        if capture_host in WILDCARD_HOSTS:
            # The default (loopback) in its place: the tunnel rule below must not add a second line for it.
            capture_host = read.refuse(
                f"CAPTURE_HOST={capture_host!r} would publish the capture proxy on every interface: set it to "
                "127.0.0.1 (behind a tunnel) or to the one address the sandboxes route to (TUNNEL_PROVIDER=direct)",
                FIELDS["CAPTURE_HOST"].default,
            )
        tunnel_provider = get("TUNNEL_PROVIDER")
        tunnel = TUNNEL_PROVIDERS.get(tunnel_provider)
        # Behind a tunnel the proxy is published by the tunnel, which reaches it on loopback; bound to a LAN
        # address it would be served there too, beyond the tunnel. Loopback, the bridge local sandboxes
        # use, or the operator's words.
        beyond_ok = get("CAPTURE_HOST_BEYOND_TUNNEL_OK")
        if tunnel.via_tunnel and capture_host not in (*LOOPBACK_HOSTS, SANDBOX_BRIDGE_HOST) and not beyond_ok:
            read.refuse(
                f"CAPTURE_HOST={capture_host!r} with TUNNEL_PROVIDER={tunnel_provider} would serve the capture proxy "
                f"on that address as well as through the tunnel: set CAPTURE_HOST=127.0.0.1 (or {SANDBOX_BRIDGE_HOST}, "
                f"the Docker bridge), or, to publish it there on purpose, "
                f"CAPTURE_HOST_BEYOND_TUNNEL_OK={CAPTURE_HOST_OPT_OUT_PHRASE}",
                None,
            )
        direct_url = get("DIRECT_URL")
        remote = not SANDBOXES.get(sandbox).host_docker
        if tunnel.needs_direct_url and remote and direct_url.lower().startswith("http://"):
            direct_url = read.refuse(
                f"DIRECT_URL={direct_url} is plain http but SANDBOX={sandbox} sandboxes reach it across the internet, "
                "where each sandbox's session key would travel in clear text: put TLS in front of the capture "
                "port and use an https:// DIRECT_URL, or use TUNNEL_PROVIDER=cloudflared",
                FIELDS["DIRECT_URL"].default,
            )
        remote_ok = get("SANDBOX_DOCKER_REMOTE_TASKS_OK")
        # The raw value: the words reader splits on whitespace, and a line break inside is one of the refusals.
        try:
            task_env_allow = allow_list(read.as_given("TASK_ENV_ALLOW"))
        except EnvError as exc:
            task_env_allow = read.refuse(str(exc), ())

        stack_name = get("STACK_NAME")
        if stack_name and (why := names.problem("STACK_NAME", stack_name, fix="or leave it empty")):
            # It names this stack's sandboxes and the trial folders under TRIALS_DIR (sandboxes.py).
            stack_name = read.refuse(why, "")

        settings = cls(
            **FIELDS.read_all(
                read,
                RENAMED,
                APART,
                given={
                    "CAPTURE_HOST": capture_host,
                    "ENGINE_URL": lambda: read_engine_url(read),
                    "DATASETS": datasets or fields.DATASETS.default,
                    "SANDBOX": sandbox,
                    "MAX_CONCURRENT_ENVS": max_envs,
                    "MAX_INFLIGHT_ROLLOUTS": max_inflight,
                    "TUNNEL_PROVIDER": tunnel_provider,
                    "AGENT_INSTALL": agent_install,
                    "CAPTURE_MAX_CONCURRENT": capture_max_concurrent,
                    "TASK_ENV_ALLOW": task_env_allow,
                    "DIRECT_URL": direct_url,
                    "STACK_NAME": stack_name,
                    "E2B_API_KEY": lambda: SANDBOXES.get(sandbox).credentials_set(read),
                    "OPENENV_CAPTURE_ADMIN_KEY": lambda: bool(get("OPENENV_CAPTURE_ADMIN_KEY")),
                    "SANDBOX_DOCKER_REMOTE_TASKS_OK": bool(remote_ok),
                },
            ),
            notes=tuple(notes),
        )
        read.check()
        return settings
