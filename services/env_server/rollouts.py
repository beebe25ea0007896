"""Admission for rollouts, and the list of those in flight (what SIGTERM has to close).

A rollout is admitted only when
  - the server is not shutting down,
  - it asks for the sandbox backend this server was configured and checked for (SANDBOX),
  - tunnel-check has verified a public URL for THIS capture proxy (its /health `instance` answered
    through the URL; the sandbox could reach nothing else: a local URL would fail 90 s later, after a
    paid sandbox was booted), and
  - its engine answers (re-probed here on every rollout, so an engine that came up after this server
    needs no restart, and one that went away is named instead of timing out inside the agent).
A refused rollout is `ok=False, reward=None`: unscorable, never a zero.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any, ClassVar

from openenv.harbor.environment import HarborEnvironment
from openenv.harbor.models import HarborRolloutResult

from stack import handoff
from stack.endpoints import openai_base
from stack.facts import HANDOFF_DIR

from .capture import pinned_url
from .checks import engine_reachable, pick_model

log = logging.getLogger("env_server")


class Inflight:
    """The asyncio tasks running rollouts. Cancelling one makes Harbor's Trial finalise: its
    `_stop_agent_environment` is shielded, so the sandbox is stopped (and deleted) before the task ends."""

    def __init__(self) -> None:
        self._tasks: dict[asyncio.Task, str] = {}
        self.draining = False

    def __len__(self) -> int:
        return len(self._tasks)

    def labels(self) -> list[str]:
        return list(self._tasks.values())

    @contextlib.contextmanager
    def track(self, label: str):
        task = asyncio.current_task()
        assert task is not None
        self._tasks[task] = label
        try:
            yield
        finally:
            self._tasks.pop(task, None)

    async def drain(self, grace_s: float) -> tuple[int, list[str]]:
        """Refuse new rollouts, cancel the running ones, wait up to `grace_s` for their sandboxes to close.

        Returns (how many were cancelled, labels of those still not finished at the deadline)."""
        self.draining = True
        tasks = dict(self._tasks)
        for task in tasks:
            task.cancel()
        if not tasks:
            return 0, []
        _done, pending = await asyncio.wait(list(tasks), timeout=grace_s)
        return len(tasks), [tasks[t] for t in pending]


def refused(error: str, harness: str, sandbox: str) -> str:
    return HarborRolloutResult(ok=False, error=error, harness=harness, sandbox=sandbox).model_dump_json()


class GatedHarborEnvironment(HarborEnvironment):
    """OpenEnv's HarborEnvironment with admission in front of `_run_rollout`; the rollout itself is OpenEnv's."""

    inflight: ClassVar[Inflight] = Inflight()
    sandbox_backend: ClassVar[str] = "e2b"
    engine_url: ClassVar[str] = ""
    engine_model: ClassVar[str] = ""
    handoff_dir: ClassVar[str] = HANDOFF_DIR
    # Called as each admitted rollout ends (trials.Retention.prune_soon: the trial folders' bound).
    after_rollout: ClassVar[Callable[[], None] | None] = None

    @classmethod
    def configure_stack(cls, settings: Any, *, model: str, llm: dict[str, Any], inflight: Inflight) -> None:
        """The one place this class is configured: OpenEnv's part (datasets, engine, its probe report)
        and the gate's (sandbox backend, hand-off, in-flight registry), from the same settings."""
        llm_url = openai_base(settings.engine_url)
        cls.configure(datasets=list(settings.datasets), llm_url=llm_url, model=model, llm=llm)
        cls.sandbox_backend = settings.sandbox
        cls.engine_url = llm_url
        cls.engine_model = model
        cls.handoff_dir = settings.handoff_dir
        cls.inflight = inflight

    async def _run_rollout(  # type: ignore[override]
        self,
        split: str,
        task_index: int,
        harness: str,
        sandbox: str,
        reward_key: str,
        keep_sandbox: bool,
        force_build: bool,
        llm_url: str = "",
        model: str = "",
        api_key: str = "",
        auth_header: str = "",
        *rest: Any,
    ) -> str:
        cls = type(self)
        if cls.inflight.draining:
            return refused("env-server is shutting down: rollout not started", harness, sandbox)
        if sandbox != cls.sandbox_backend:
            return refused(
                f"rollout asked for sandbox {sandbox!r} but this env server runs SANDBOX={cls.sandbox_backend} "
                f"(the backend its startup checks covered): pass sandbox={cls.sandbox_backend!r}, or change "
                "SANDBOX and restart env-server",
                harness,
                sandbox,
            )
        # The record states its own validity: a killed tunnel-check cannot withdraw it, but it expires.
        verified, why = handoff.lookup(cls.handoff_dir)
        if verified is None:
            return refused(
                f"tunnel not verified yet ({why}): no public URL for the capture proxy, so a sandbox could not "
                "reach it; rollout not started. Wait for tunnel-check to verify the URL (docker compose logs "
                "tunnel-check)",
                harness,
                sandbox,
            )
        service = self._service()
        ours = getattr(service, "instance_id", "") if service is not None else ""
        if verified.instance and ours and verified.instance != ours:
            # Verified for another proxy process (this server restarted since): the URL may still route
            # here, but nobody has proven it. tunnel-check re-verifies within one interval.
            return refused(
                f"tunnel URL {verified.url} was verified for capture proxy instance {verified.instance}, not "
                f"this one ({ours}); rollout not started. tunnel-check re-verifies it within "
                "TUNNEL_CHECK_INTERVAL_S",
                harness,
                sandbox,
            )

        if not llm_url:
            llm_url = cls.engine_url
        ok, why, served = await asyncio.to_thread(engine_reachable, llm_url)
        if not ok:
            return refused(
                f"engine {llm_url} is not reachable ({why}); rollout not started. Check `docker compose ps "
                "engine` and ENGINE_URL",
                harness,
                sandbox,
            )
        if not model:
            model = pick_model(cls.engine_model, served)

        token = pinned_url.set(verified.url)
        label = f"{split or '-'}#{task_index} {harness}/{sandbox}"
        try:
            with cls.inflight.track(label):
                return await super()._run_rollout(
                    split,
                    task_index,
                    harness,
                    sandbox,
                    reward_key,
                    keep_sandbox,
                    force_build,
                    llm_url,
                    model,
                    api_key,
                    auth_header,
                    *rest,
                )
        finally:
            pinned_url.reset(token)
            if cls.after_rollout is not None:
                cls.after_rollout()
