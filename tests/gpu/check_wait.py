"""Waiting for a process of the GPU check to become ready, and saying why when it does not (stdlib only).

A failed wait used to end in `TimeoutError('engine not ready within 420s')`: the probe's verdict, which
named the cause (a flat top-two gap), was thrown away, and engine.log held only `200 OK` lines. Now the
error carries what the readiness check last said and the process's last log lines.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path

LOG_LINES = 40


class NotReady(RuntimeError):
    pass


def tail(path: Path | None, lines: int = LOG_LINES) -> str:
    if path is None:
        return ""
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"(cannot read {path}: {exc})"
    return "\n".join(text.splitlines()[-lines:]) or f"({path} is empty)"


class Readiness:
    """A readiness check that remembers what it last said: `check()` returns (ready, words)."""

    def __init__(self, check: Callable[[], tuple[bool, str]]):
        self._check = check
        self.said = "(the check never ran)"

    def __call__(self) -> bool:
        try:
            ready, self.said = self._check()
        except Exception as exc:  # noqa: BLE001  a refused connection while it starts; said, never hidden
            ready, self.said = False, f"{type(exc).__name__}: {exc}"
        return ready


def command_check(argv: list[str], env: dict[str, str], timeout_s: float = 120) -> Readiness:
    """Ready when the command exits 0; it says its output (the probe prints its verdict on one line)."""

    def run() -> tuple[bool, str]:
        try:
            done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return False, f"{' '.join(argv)} did not answer within {timeout_s:g} s"
        words = (done.stdout.strip() + "\n" + done.stderr.strip()).strip()
        return done.returncode == 0, words or f"(exit {done.returncode}, no output)"

    return Readiness(run)


def wait_until(
    ready: Readiness,
    proc: subprocess.Popen,
    what: str,
    deadline_s: float,
    log: Path | None = None,
    poll_s: float = 1.0,
    limit_name: str = "",
) -> float:
    """Seconds until `ready()`; NotReady if `proc` exits first or the deadline passes (checked once at least).

    The error says what `ready` last said and the last lines of `log`; `limit_name` names the limit that ran out
    (Budget.limit), else the seconds do."""
    t0 = time.monotonic()
    while True:
        if proc.poll() is not None:
            raise NotReady(_report(f"{what} exited with {proc.returncode} before it was ready", ready, log))
        if ready():
            return time.monotonic() - t0
        if time.monotonic() - t0 >= deadline_s:
            raise NotReady(_report(f"{what} not ready within {limit_name or f'{deadline_s:g} s'}", ready, log))
        time.sleep(poll_s)


class Budget:
    """The whole check's time limit (GPU_CHECK_TOTAL_TIMEOUT_S): each wait gets the lesser of its own limit and what
    is left of it, and its failure names whichever bound it. The device call that runs the check is killed at 600 s
    with nothing said; a wait that ends first says which phase was slow and writes the figures so far."""

    def __init__(
        self, total_s: float, knob: str = "GPU_CHECK_TOTAL_TIMEOUT_S", clock: Callable[[], float] = time.monotonic
    ):
        self.total_s, self.knob, self.clock = total_s, knob, clock
        self.t0 = clock()

    def left(self) -> float:
        return max(0.0, self.total_s - (self.clock() - self.t0))

    def limit(self, own_s: float, own_knob: str) -> tuple[float, str]:
        """(seconds, what the limit is called) for a wait whose own limit is `own_s` (set by `own_knob`)."""
        left = self.left()
        if left < own_s:
            return left, f"the {left:.0f} s left of {self.knob}={self.total_s:g} s"
        return own_s, f"{own_knob}={own_s:g} s"


def run_until(
    proc: subprocess.Popen,
    what: str,
    deadline_s: float,
    limit_name: str,
    log: Path | None = None,
    watch: tuple[tuple[subprocess.Popen, str, Path | None], ...] = (),
    poll_s: float = 1.0,
) -> float:
    """Seconds until `proc` exits (its code is the caller's to judge). NotReady, with `proc` killed, if the deadline
    passes or a watched process (the engine, while the trainer runs) exits first: a trainer pushing into an engine
    that died would otherwise wait out its whole limit and report only its own side."""
    t0 = time.monotonic()
    while True:
        try:
            proc.wait(timeout=poll_s)
            return time.monotonic() - t0
        except subprocess.TimeoutExpired:
            pass
        for other, name, other_log in watch:
            if other.poll() is not None:
                _kill(proc)
                parts = [f"the {name} exited with {other.returncode} while the {what} ran"]
                if other_log is not None:
                    parts.append(f"last {LOG_LINES} lines of {other_log}:\n{tail(other_log)}")
                if log is not None:
                    parts.append(f"last {LOG_LINES} lines of {log}:\n{tail(log)}")
                raise NotReady("\n".join(parts))
        if time.monotonic() - t0 >= deadline_s:
            _kill(proc)
            headline = f"the {what} did not finish within {limit_name}"
            raise NotReady(headline + (f"; last {LOG_LINES} lines of {log}:\n{tail(log)}" if log is not None else ""))


def _kill(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _report(headline: str, ready: Readiness, log: Path | None) -> str:
    parts = [headline, f"its readiness check last said: {ready.said}"]
    if log is not None:
        parts.append(f"last {LOG_LINES} lines of {log}:\n{tail(log)}")
    return "\n".join(parts)
