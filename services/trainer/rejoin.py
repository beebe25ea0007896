"""An engine lost during a weight push is waited out, then re-joined and sent the current weights: the run goes on.

Each weight push (TRL 1.16.0, `_sync_weight_merged`, read at that tag) is `pause()`, `send_weights(iterator)`,
`resume()` on the weight-transfer backend, from the trainer's `on_step_end`. When the engine dies or hangs, one of
those raises: a refused or reset connection at once, or, for an engine that no longer answers, TRL's HTTP timeout
(`weight_sync_timeout` for the transfer, 300 s for pause/resume in TRL's own client; WEIGHT_SYNC_TIMEOUT_S sets the
former, trainer/config.py). Unhandled, that ended the run with a traceback and a `failed` status.

`Rejoin` wraps any backend and, after the first push worked (a failing FIRST push is a transport to fix, reported
by weights.FirstSync), treats a lost engine as the env server's transport failures are treated (factory.py): one
line, the reason in status.json (`waiting-for-rollouts`, with the engine named), a capped backoff, and no crash.
Compose does not restart the engine (a reloaded vLLM serves the base weights outside the trainer's NCCL group), so
the line says what to run; once the engine answers `/health` again the trainer sets the weight-transfer group up
anew (`init_weight_transfer`) and pushes the weights it holds now (`fresh_weights`: TRL's own `_streaming_iter`),
so the new engine serves the policy being trained, with no step lost. SIGTERM while waiting stops the run at the
step just finished (trainer/stop.py saves it).

A failure that is not the engine being gone (an HTTP error the engine answered with, a CUDA OOM on its side) is
raised as before: waiting would not mend it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator

import httpx

from .waiting import Backoff

logger = logging.getLogger(__name__)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def _transport_errors() -> tuple[type[BaseException], ...]:
    """What an engine that died or hangs raises through a backend: sockets (OSError covers refused, reset and
    timed-out connections), httpx's transport errors, and requests' (TRL's VLLMClient and the mock's client use
    requests; its ConnectionError and Timeout are not OSErrors)."""
    found: list[type[BaseException]] = [OSError, httpx.TransportError]
    try:
        import requests

        found += [requests.exceptions.ConnectionError, requests.exceptions.Timeout]
    except ImportError:  # the host's unit-test venv; the trainer image has it (TRL depends on it)
        pass
    return tuple(found)


def engine_lost(exc: BaseException) -> bool:
    """Whether `exc` (or what it was raised from: TRL wraps the HTTP error in a RuntimeError) is a lost engine."""
    errors = _transport_errors()
    return any(isinstance(e, errors) for e in _chain(exc))


def timed_out(exc: BaseException) -> bool:
    names = ("Timeout", "TimeoutError", "ReadTimeout", "timeout")
    return any(type(e).__name__ in names or isinstance(e, TimeoutError) for e in _chain(exc))


def root_detail(exc: BaseException) -> str:
    *_, root = _chain(exc)
    return " ".join(f"{type(root).__name__}: {root}".split())[:240]


def engine_answers(engine_url: str, timeout_s: float = 5.0) -> bool:
    """The engine's `/health` answers 200 (vLLM and the mock engine both serve it)."""
    try:
        return httpx.get(f"{engine_url.rstrip('/')}/health", timeout=timeout_s).status_code == 200
    except httpx.HTTPError:
        return False


def _stop_requested() -> str | None:
    from . import stop  # imports transformers: only where the trainer runs

    return stop.requested()


def _stop(reason: str) -> BaseException:
    from . import stop

    return stop.StopRequested(reason)


class Rejoin:
    """Any AsyncGRPO weight-transfer backend, with a lost engine waited out and re-joined (module docstring)."""

    def __init__(
        self,
        inner,
        engine_url: str,
        fresh_weights: Callable[[], Iterator],
        *,
        run_name: str = "",
        timeout_s: float | None = None,
        status_path: str = "",
        answers: Callable[[str], bool] = engine_answers,
        stop_requested: Callable[[], str | None] = _stop_requested,
        stop_error: Callable[[str], BaseException] = _stop,
        on_rejoin: Callable[[], None] = lambda: None,
        say: Callable[[str], None] = lambda line: print(line, flush=True),
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.inner = inner
        self.engine_url = engine_url
        self.fresh_weights = fresh_weights
        self.run_name = run_name
        self.timeout_s = timeout_s
        self.answers = answers
        self.stop_requested = stop_requested
        self.stop_error = stop_error
        self.on_rejoin = on_rejoin
        self.say = say
        self.clock = clock
        # The env server's waits' schedule and status field (2 s doubling to 30 s; `waiting-for-rollouts` with
        # the engine named: no rollout runs while it is gone), in this wait's own words.
        self.backoff = Backoff(
            status_path,
            sleep=sleep,
            clock=clock,
            log=lambda line, **_: say(line),
            waiting="the engine is gone",
            over="the engine answered and was re-joined",
        )
        self.armed = False  # after the first push: a failing first push is weights.FirstSync's line
        self.rejoins = 0

    # -- the backend's five methods, as TRL 1.16.0 calls them --------------------------------------------------
    def init_weight_transfer(self) -> None:
        self.inner.init_weight_transfer()

    def pause(self) -> None:
        self._phase("pausing the engine", self.inner.pause)

    def send_weights(self, iterator) -> None:
        self._phase("sending the weights", lambda: self.inner.send_weights(iterator))

    def resume(self) -> None:
        self._phase("resuming the engine", self.inner.resume, resume=True)
        self.armed = True

    def destroy(self) -> None:
        self.inner.destroy()

    # -- the wait ----------------------------------------------------------------------------------------------
    def _phase(self, phase: str, call: Callable[[], object], resume: bool = False) -> None:
        if not self.armed:
            call()
            return
        try:
            call()
        except Exception as exc:
            if not engine_lost(exc):
                raise
            self._wait_and_rejoin(phase, exc, resume)

    def line(self, phase: str, exc: BaseException) -> str:
        """The one line said when the engine is lost."""
        cause = root_detail(exc)
        if timed_out(exc) and self.timeout_s is not None:
            cause += f"; no answer within WEIGHT_SYNC_TIMEOUT_S={self.timeout_s:g} s"
        resume = (
            f" To stop instead: `docker compose stop trainer` saves this step; RUN_NAME={self.run_name} resumes it."
        )
        return (
            f"trainer: the engine at {self.engine_url} was lost while {phase} in a weight push ({cause}). "
            "Waiting for it: compose does not restart the engine, so run `docker compose up -d engine`; once it "
            "answers, this run re-joins it, sends it the weights trained so far and goes on." + resume
        )

    def _wait_and_rejoin(self, phase: str, exc: BaseException, resume: bool) -> None:
        self.say(self.line(phase, exc))
        since = self.clock()
        reason = f"engine {self.engine_url} lost while {phase} ({root_detail(exc)}); `docker compose up -d engine`"
        while True:
            if why := self.stop_requested():
                raise self.stop_error(f"{why} while waiting for the engine")
            if not self.answers(self.engine_url):
                self.backoff.wait(reason)
                continue
            try:
                # A new weight-transfer group (the old one's peer is gone), the engine paused, every weight sent;
                # resumed too when resuming is what failed (TRL resumes it otherwise).
                self.inner.init_weight_transfer()
                self.inner.pause()
                self.inner.send_weights(self.fresh_weights())
                if resume:
                    self.inner.resume()
            except Exception as again:
                if not engine_lost(again):
                    raise
                reason = f"engine {self.engine_url} answers but re-joining it failed ({root_detail(again)})"
                self.backoff.wait(reason)
                continue
            self.rejoins += 1
            self.on_rejoin()
            self.backoff.done()
            self.say(
                f"trainer: re-joined the engine at {self.engine_url} after {self.clock() - since:.0f} s and sent it "
                "the current weights; training goes on"
            )
            return
