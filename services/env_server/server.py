"""Boot: check, report, serve. OpenEnv's harbor server, with our bind addresses and our admission.

Same order as OpenEnv's `serve_harbor`: startup checks, capture proxy, then the Task API + MCP app
(OpenEnv's `create_app` around a HarborEnvironment). Differences, each for a contract of the stack
(README.md, services/env_server/README.md):
the proxy binds CAPTURE_HOST (capture.py), the advertised URL is the verified hand-off (capture.py,
rollouts.py), an unreachable engine is reported and never fatal, SIGTERM closes in-flight
sandboxes before the process exits, and (SANDBOX=docker) the task images build in the background from
the start (prebuild.py) instead of inside each task's first rollout.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from typing import Any

from stack import datasets as task_check
from stack import handoff
from stack.backends import SANDBOXES
from stack.endpoints import openai_base
from stack.facts import LOOPBACK_HOSTS
from stack.readers.env_server import EnvError, Settings

log = logging.getLogger("env_server")


def say(line: str = "") -> None:
    # One write per line: print() writes the newline separately, and the prebuild threads' lines came
    # out joined ("...: buildingprebuild  rollout ... waited").
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def fail(lines: str) -> None:
    for line in lines.splitlines():
        say(f"env-server: cannot start: {line}")
    sys.exit(2)


def build_app(service: Any, settings: Settings, llm: dict[str, Any], inflight: Any) -> Any:
    """OpenEnv's `serving.build_app`, with the gated environment class and without the Gradio UI
    (the Task API is loopback-only here; nobody browses it)."""
    from openenv.core.env_server.http_server import create_app
    from openenv.core.env_server.mcp_environment import CallToolAction, CallToolObservation
    from openenv.harbor.models import HarborState
    from openenv.harbor.serving import SameOrigin

    from .rollouts import GatedHarborEnvironment

    GatedHarborEnvironment.configure_stack(settings, model=service.model, llm=llm, inflight=inflight)
    app = create_app(
        GatedHarborEnvironment,
        CallToolAction,
        CallToolObservation,
        state_cls=HarborState,
        env_name="harbor_env",
        max_concurrent_envs=settings.max_concurrent_envs,
    )
    app.add_middleware(SameOrigin)

    @app.get("/stack/status")
    def stack_status() -> dict[str, Any]:
        """For `scripts/status`: sandboxes in flight and the hand-off as this server reads it (loopback only)."""
        inflight = GatedHarborEnvironment.inflight
        verified, why = handoff.lookup(GatedHarborEnvironment.handoff_dir)
        return {
            "inflight": len(inflight),
            "labels": inflight.labels(),
            "draining": inflight.draining,
            "advertised_url": verified.url if verified else None,
            "no_url_because": why or None,
            "public_front": {
                "refused": dict(service.front.refused),
                "fields_dropped": dict(service.front.fields_dropped),
                "output_capped": dict(service.front.output_capped),
            },
        }

    return app


def make_server(app: Any, settings: Settings, service: Any, inflight: Any):
    import uvicorn

    class DrainingServer(uvicorn.Server):
        """SIGTERM/SIGINT: refuse new rollouts, cancel running ones so Harbor stops their sandboxes,
        wait up to ENV_SERVER_SHUTDOWN_GRACE_S, then stop both servers. A second signal exits at once."""

        _loop: asyncio.AbstractEventLoop | None = None
        _draining = False

        async def startup(self, sockets=None) -> None:
            self._loop = asyncio.get_running_loop()
            await super().startup(sockets)

        def handle_exit(self, sig: int, frame: Any) -> None:
            if self._draining or self._loop is None:
                self.should_exit = True
                self.force_exit = self._draining
                return
            self._draining = True
            self._loop.call_soon_threadsafe(lambda: asyncio.ensure_future(self._drain(sig)))

        async def _drain(self, sig: int) -> None:
            n = len(inflight)
            say(f"shutdown  signal {sig}: closing {n} in-flight rollout(s) (grace {settings.shutdown_grace_s:.0f}s)")
            cancelled, left = await inflight.drain(settings.shutdown_grace_s)
            if left:
                say(
                    f"shutdown  {len(left)} rollout(s) still closing at the deadline: {', '.join(left)}; "
                    "their sandboxes may outlive this process (E2B: list them with `e2b sandbox list`)"
                )
            else:
                say(f"shutdown  {cancelled} rollout(s) cancelled, every sandbox closed")
            service.stop()
            self.should_exit = True

    from .client_watch import CancelOnDisconnect

    def client_gone(path: str) -> None:
        say(f"client    gone during a step on {path}: rollout cancelled, its sandbox is being closed")

    config = uvicorn.Config(
        CancelOnDisconnect(app, on_cancel=client_gone),
        host=settings.env_server_host,
        port=settings.env_server_port,
        log_level="info",
        # Idle MCP websockets from the trainer must not hold the exit once the rollouts are closed.
        timeout_graceful_shutdown=5,
    )
    return DrainingServer(config)


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    say("env-server: starting (OpenEnv harbor server; Task API + MCP, capture proxy)")
    try:
        settings = Settings.from_env()
    except EnvError as exc:
        fail(str(exc))

    from . import checks

    lines: list[str] = []
    try:
        checks.check_dataset_sources(settings)
        datasets = checks.check_datasets(
            settings.datasets, max_chars=settings.task_instruction_max_chars, bad_tasks=settings.dataset_bad_tasks
        )
        sandbox = checks.check_sandbox(settings)
    except EnvError as exc:
        fail(str(exc))
    for d in datasets:
        lines.append(d.line())
        lines += [f"          skipped: {why.removesuffix(' ' + task_check.SKIP_HINT)}" for why in d.skipped]
    lines.append(checks.drop_unneeded_hf_token(settings.datasets, os.environ))
    lines.append(f"sandbox   {settings.sandbox}")
    lines += sandbox.lines

    # Harbor is imported from here on (it is slow to import, and not needed to fail fast above).
    from . import agent_install, task_env

    lines.append(agent_install.apply(settings.agent_install, settings.wheelhouse_dir))
    lines.append(task_env.install(settings.task_env_allow))
    from . import task_preview

    lines.append(task_preview.install(settings.task_instruction_max_chars))

    from . import sandboxes

    prefix = sandboxes.trial_prefix(sandboxes.stack_name(settings.stack_name, settings.sandbox))
    sandboxes.install_prefix(prefix)
    lines.append(f"stack     sandboxes are named {prefix}-<task>-<id> (STACK_NAME)")
    lines.append(sandboxes.reap(settings.sandbox, prefix))
    from . import leftovers, trials

    lines.append(leftovers.reap(settings.sandbox, prefix, settings.trials_dir))
    try:
        retention = trials.begin(settings.trials_dir, prefix, settings.trials_keep, settings.trials_max_gb, say)
    except EnvError as exc:  # the disk cannot keep TRIALS_MAX_GB
        fail(str(exc))
    lines.append(retention.describe())
    if SANDBOXES.get(settings.sandbox).host_docker:
        from . import sandbox_calls, sandbox_stop

        lines.append(sandbox_stop.install())
        lines.append(sandbox_calls.install())
    os.environ["OPENENV_HARBOR_TRIALS_DIR"] = settings.trials_dir

    # The task images build from here on, in the background, while the engine loads (prebuild.py); each
    # build reports its own end as it happens, so these lines may come before the startup report.
    from . import prebuild

    lines += prebuild.begin(settings.sandbox, settings.datasets, prefix, say)

    engine = checks.probe_engine(openai_base(settings.engine_url), settings.model)
    lines.append(engine.line())
    lines += [f"          {f}" for f in engine.findings]
    if engine.unproven_line():
        lines.append(engine.unproven_line())

    from openenv.harbor.capabilities import capabilities
    from openenv.harbor.serving import HarborService

    from .capture import LoopbackHarborService
    from .rollouts import GatedHarborEnvironment, Inflight

    service = LoopbackHarborService(
        capture_host=settings.capture_host,
        handoff_dir=settings.handoff_dir,
        llm_url=openai_base(settings.engine_url),
        model=engine.model or settings.model,
        datasets=list(settings.datasets),
        capture_port=settings.capture_port,
        api_key=os.environ.get("OPENENV_LLM_API_KEY") or None,
        # Tokens only when the engine was measured at it; rollouts re-probe their engine anyway.
        capture_level=engine.capture_level or "text",
        max_output_tokens=settings.max_output_tokens or None,
        max_body_bytes=settings.capture_max_body_mb * 1024 * 1024,
        max_concurrent=settings.capture_max_concurrent,
    )
    try:
        where = service.start()
    except RuntimeError as exc:
        fail(str(exc))
    HarborService.set_current(service)
    key = "from OPENENV_CAPTURE_ADMIN_KEY" if settings.admin_key_set else "random per process (routes locked)"
    lines.append(f"capture   proxy {where} instance={service.instance_id}; admin key {key}")
    lines.append(
        "          public: GET /health (instance only), POST /v1/chat/completions (live session key); "
        f"bodies <= {settings.capture_max_body_mb} MB (CAPTURE_MAX_BODY_MB), {settings.capture_max_concurrent} "
        "model calls at once (CAPTURE_MAX_CONCURRENT); engine parameter fixes frozen"
    )
    lines.append(
        f"          headers within {service.header_timeout_s:.0f} s, bodies within {service.front.body_timeout_s:.0f} s, "
        f"{service.max_connections} connections (longest-waiting shed first); output <= "
        f"{settings.max_output_tokens or 'unbounded'} tokens per turn (MAX_OUTPUT_TOKENS)"
    )
    if settings.capture_host not in LOOPBACK_HOSTS:
        lines.append(
            f"          CAPTURE_HOST={settings.capture_host}: the proxy is reachable beyond loopback on purpose"
        )
    lines.append(checks.handoff_line(settings.handoff_dir))
    lines.append(
        f"task api  http://{settings.env_server_host}:{settings.env_server_port}/harbor_env/splits "
        f"(MCP at /mcp; MAX_CONCURRENT_ENVS={settings.max_concurrent_envs}, "
        f"MAX_INFLIGHT_ROLLOUTS={settings.max_inflight_rollouts})"
    )
    lines += [f"note      {n}" for n in settings.notes]

    inflight = Inflight()
    app = build_app(service, settings, engine.report, inflight)
    GatedHarborEnvironment.after_rollout = retention.prune_soon

    # OpenEnv's own report (Harbor's preflight for the sandbox, datasets, validated harnesses), then ours.
    caps = capabilities(datasets=list(settings.datasets), llm=engine.report, sandboxes=(settings.sandbox,))
    say(caps.render())
    say("\n=== env-server startup report ===")
    for line in lines:
        say(line)
    say("=================================\n")

    server = make_server(app, settings, service, inflight)
    try:
        server.run()
    finally:
        service.stop()
    say("env-server: stopped")
