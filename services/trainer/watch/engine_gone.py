"""The engine is gone: the trainer saves the step it trained, stops, says so in one line and exits EXIT_CODE.

Why it stops rather than waits: compose never restarts the engine (and the chart never restarts its Job), on
purpose. A reloaded vLLM serves the base weights outside the trainer's NCCL weight-transfer group, and joining a
new group after a dead peer is unverified and can hang in NCCL. So waiting would idle a paid GPU for an engine
nobody restarts. The operator starts the engine and then the trainer again, with the same RUN_NAME: the new
engine gets a fresh group and the trainer's weights at the cold sync, as at any start.

Where a lost engine shows (TRL 1.16.0, read at that tag):

1. In a weight push after the first. `_sync_weight_merged` runs from `on_step_end` of every step and calls the
   backend's `pause()`, `send_weights(iterator)` and `resume()`. A dead engine refuses or resets the connection
   at once. A hung one answers nothing until a timeout: WEIGHT_SYNC_TIMEOUT_S on the mock's and the ipc backend's
   requests (every one of them, trainer/transfer/ipc_transfer.py) and on
   TRL's NCCL transfer (`update_weights`, and again on its `finish_weight_update` clean-up), and TRL's own fixed
   300 s (`_CONTROL_TIMEOUT`) on pause, resume and `start_weight_update`. `PushWatch` turns such a failure
   (`engine_lost`) into `EngineGone`. The first push (the cold sync at train begin) is weights.FirstSync's: it
   failing is a transport to fix, not an engine that was lost.
2. While the trainer waits for rollouts. In this stack the agent calls the engine from its sandbox through the
   env server's capture proxy, and the trainer never does (loop-owning mode). With the engine dead, the env
   server refuses every new rollout ("engine ... is not reachable; rollout not started") and the rollout worker
   waits on those refusals (trainer/rollouts/waiting.py). Nothing fails in TRL's loop, so the queue just stays empty and
   TRL's `RolloutQueueDataset` calls the worker's `check_health` every 5 s (trainer/rollouts/worker.py).
   `HealthWatch.check` probes the engine's `/health` there (5 s timeout). Once it has not answered 200 for
   GONE_AFTER_S, it raises `EngineGone`. The main process's own rollouts (warm-up, periodic evaluation) run the
   same check on each wait (factory.EnvServerRunner.engine_watch).

Either way the exception leaves `trainer.train()` at a point where the model holds exactly the last finished
step (the push comes after the optimizer step, and no optimizer step happens while rollouts are awaited).
TRL's own `finally` stops the rollout worker (15 s, then terminate). train.py saves that step through
`stop.save_now` (the SIGTERM path's save, which skips a checkpoint that already exists), sets status.json
`stopped` with the reason, prints `line()` and exits EXIT_CODE.

The bounds, from the kill to the exit, are these plus the save. In a push, a refused engine is noticed at once
and a hung one within WEIGHT_SYNC_TIMEOUT_S (NCCL: within TRL's 300 s on pause/resume, and 2 x WEIGHT_SYNC_TIMEOUT_S
when the transfer itself hangs). While waiting for rollouts, it takes GONE_AFTER_S after the first failed probe,
plus up to 5 s for TRL's poll and 5 s for a probe. Stopping the rollout worker adds up to 20 s.
"""

from __future__ import annotations

import faulthandler
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx

# Distinct from 1 (a failure) and 3 (a stop rule, train.py). Compose shows it as `Exited (4)`.
EXIT_CODE = 4
# A live engine answers /health within milliseconds: vLLM checks a flag, and the mock answers on its own thread
# pool while it generates. So 30 s of no answer, about four probes in a row, is an engine that is gone, not busy.
GONE_AFTER_S = 30.0
PROBE_TIMEOUT_S = 5.0
# How long the interpreter may take to exit once the line is out (stop_run).
TEARDOWN_S = 60


class EngineGone(Exception):
    """The engine is gone. `what` says what failed and after how long (`after_s`), `detail` the error seen."""

    def __init__(self, engine_url: str, what: str, after_s: float, detail: str):
        self.engine_url, self.what, self.after_s, self.detail = engine_url, what, after_s, detail
        # Set by train.py where training ran: the last finished step, and its checkpoint once saved.
        self.step: int | None = None
        self.saved: str | None = None
        super().__init__(self.reason())

    def reason(self) -> str:
        """status.json's `reason`: what failed and how, without the resume steps (scripts/status shows it)."""
        return f"the engine at {self.engine_url} is gone: {self.what} ({self.detail})"

    def line(self, step: int, saved: str | None, run_name: str, where: str) -> str:
        """The one line: what failed and after how long, what is saved, how to resume `where` (`resume_steps`)."""
        kept = f"step {step} is saved ({saved})" if saved else "no step was trained yet, so nothing is saved"
        return f"trainer: {self.reason()}. Stopped (exit {EXIT_CODE}); {kept}. {resume_steps(where, run_name)}"


def stop_run(gone: EngineGone, status: Any, s: Any, resume: Path | None) -> None:
    """Stop the run: status.json `stopped` with the reason, the one line, SystemExit(EXIT_CODE).

    `status` is the run's RunStatus, `s` its Settings. When the engine was gone before training ran (the warm-up;
    `gone.step` unset), what is kept is the checkpoint this run resumed from, if any."""
    step, saved = gone.step, gone.saved
    if step is None:
        step, saved = (int(resume.name.rsplit("-", 1)[1]), resume.name) if resume else (0, None)
    status.update(state="stopped", step=step, last_checkpoint=saved, reason=gone.reason())
    print(gone.line(step, saved, s.run_name, form(s.weight_transfer, s.deployment)), flush=True)
    # The checkpoint and status are written and the line is out, so nothing left needs the interpreter's own
    # teardown. On GPU, a daemon thread of TRL's NCCL transfer may be stuck in a collective with the dead peer,
    # and a communicator's clean-up can wait on it. So a teardown that outlasts TEARDOWN_S ends the process
    # anyway, with exit code 1 and every thread's stack. In the CPU form the teardown takes about a second.
    faulthandler.dump_traceback_later(TEARDOWN_S, exit=True, file=sys.__stderr__)
    raise SystemExit(EXIT_CODE)


def form(weight_transfer: str, deployment: str) -> str:
    """Where this trainer runs, for the resume steps: kubernetes (DEPLOYMENT), compose-cpu (the mock's weight
    transfer is the CPU form's), compose-one-gpu (ipc is the one-GPU form's) or compose."""
    from stack.backends import WEIGHT_TRANSFERS
    from stack.deployment import KUBERNETES

    if deployment == KUBERNETES:
        return "kubernetes"
    return WEIGHT_TRANSFERS.get(weight_transfer).compose_form


def resume_steps(where: str, run_name: str) -> str:
    """How to go on `where`: compose, compose-cpu, compose-one-gpu or kubernetes (`form`)."""
    if where == "kubernetes":
        # The chart's README (Upgrades and restarts): both Jobs are immutable, so they are deleted and upgraded.
        return (
            "The chart never restarts the engine Job. To resume: `kubectl -n <ns> delete job <release>-engine "
            f"<release>-trainer --wait`, then `helm upgrade <release> ... --reuse-values` (same run name, {run_name})"
        )
    cmd = {
        "compose-cpu": "scripts/compose -f compose.yaml -f compose.cpu.yaml",
        "compose-one-gpu": "scripts/compose --one-gpu",
    }.get(where, "docker compose")
    # RUN_NAME on the command line: the container was created with the name it had then (empty for a fresh
    # name), and a different value makes compose re-create it with this run's name.
    return (
        f"Compose does not restart the engine. To resume: `{cmd} up -d engine`, then "
        f"`RUN_NAME={run_name} {cmd} up -d trainer`"
    )


# --- what a lost engine raises ---------------------------------------------------------------------------------


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def _transport_errors() -> tuple[type[BaseException], ...]:
    """What an engine that died or hangs raises through a backend. That is sockets (OSError covers refused, reset
    and timed-out connections), httpx's transport errors, and requests' errors: TRL's VLLMClient and the mock's
    client use requests, whose ConnectionError and Timeout are not OSErrors."""
    found: list[type[BaseException]] = [OSError, httpx.TransportError]
    try:
        import requests

        found += [requests.exceptions.ConnectionError, requests.exceptions.Timeout]
    except ImportError:  # the host's unit-test venv; the trainer image has it (TRL depends on it)
        pass
    return tuple(found)


def engine_lost(exc: BaseException) -> bool:
    """Whether `exc`, or what it was raised from, is a lost engine. TRL wraps the HTTP error in a RuntimeError."""
    errors = _transport_errors()
    return any(isinstance(e, errors) for e in _chain(exc))


def timed_out(exc: BaseException) -> bool:
    names = ("Timeout", "TimeoutError", "ReadTimeout", "ConnectTimeout", "timeout")
    return any(type(e).__name__ in names or isinstance(e, TimeoutError) for e in _chain(exc))


def root_detail(exc: BaseException) -> str:
    *_, root = _chain(exc)
    return " ".join(f"{type(root).__name__}: {root}".split())[:240]


# --- 1. a weight push ---------------------------------------------------------------------------------------


class PushWatch:
    """Any AsyncGRPO weight-transfer backend. Once a push has worked, a lost engine in a later one raises EngineGone.

    A failure that is not a lost engine (an HTTP error the engine answered with, a CUDA OOM on its side) is raised
    as it is: it is not the engine being gone, and the traceback is the report."""

    def __init__(
        self, inner, engine_url: str, timeout_s: float | None = None, clock: Callable[[], float] = time.monotonic
    ):
        self.inner = inner
        self.engine_url = engine_url
        self.timeout_s = timeout_s
        self.clock = clock
        self.armed = False  # after the first push: a failing first push is weights.FirstSync's line
        self.gone: EngineGone | None = None

    # The backend's five methods, as TRL 1.16.0 calls them.
    def init_weight_transfer(self) -> None:
        self.inner.init_weight_transfer()

    def pause(self) -> None:
        self._phase("pausing it for a weight push", self.inner.pause)

    def send_weights(self, iterator) -> None:
        self._phase("sending it the weights", lambda: self.inner.send_weights(iterator))

    def resume(self) -> None:
        self._phase("resuming it after a weight push", self.inner.resume)
        self.armed = True

    def destroy(self) -> None:
        self.inner.destroy()

    def _phase(self, what: str, call: Callable[[], object]) -> None:
        if not self.armed:
            call()
            return
        t0 = self.clock()
        try:
            call()
        except Exception as exc:
            if not engine_lost(exc):
                raise
            detail = root_detail(exc)
            if timed_out(exc) and self.timeout_s is not None:
                detail += f"; no answer within WEIGHT_SYNC_TIMEOUT_S={self.timeout_s:g} s"
            took = self.clock() - t0
            self.gone = EngineGone(self.engine_url, f"{what} failed after {took:.1f} s", took, detail)
            raise self.gone from exc


# --- 2. while rollouts are awaited --------------------------------------------------------------------------


def probe(engine_url: str, timeout_s: float = PROBE_TIMEOUT_S) -> str:
    """'' when the engine's /health answers 200 (vLLM and the mock engine both serve it), else what it did."""
    try:
        code = httpx.get(f"{engine_url.rstrip('/')}/health", timeout=timeout_s).status_code
    except httpx.HTTPError as exc:
        return " ".join(f"{type(exc).__name__}: {exc}".split())[:240] or type(exc).__name__
    return "" if code == 200 else f"/health answered HTTP {code}"


class HealthWatch:
    """The engine's /health, probed each time the caller waits. Raises EngineGone once it has not answered 200 for
    `gone_after_s` in a row; any 200 starts the count again."""

    def __init__(
        self,
        engine_url: str,
        gone_after_s: float = GONE_AFTER_S,
        answer: Callable[[str], str] = probe,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.engine_url = engine_url
        self.gone_after_s = gone_after_s
        self.answer = answer
        self.clock = clock
        self.failing_since: float | None = None

    def check(self, waiting_for: str = "rollouts") -> None:
        why = self.answer(self.engine_url)
        now = self.clock()
        if not why:
            self.failing_since = None
            return
        if self.failing_since is None:
            self.failing_since = now
        failing = now - self.failing_since
        if failing >= self.gone_after_s:
            raise EngineGone(
                self.engine_url,
                f"its /health has not answered for {failing:.0f} s while the trainer waited for {waiting_for}",
                failing,
                why,
            )
