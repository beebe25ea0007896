"""Helpers every suite needs: free loopback ports and waiting on a condition (never on a sleep).

On the path through pyproject's `pythonpath` (pytest adds tests/ for every suite, on the host and in
the images): `from support import free_port, wait_healthy, wait_until`.
"""

from __future__ import annotations

import socket
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def free_ports(n: int) -> list[int]:
    """`n` distinct loopback ports nobody listens on now (all held at once while picked, so distinct)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def free_port() -> int:
    return free_ports(1)[0]


def wait_until(
    predicate: Callable[[], T], timeout_s: float, what: str, *, poll_s: float = 0.1, log: Path | None = None
) -> T:
    """Poll `predicate` until it returns something truthy and return that. An exception counts as "not
    yet" (a server that is still starting refuses connections). On timeout, fail naming `what`, the last
    answer, and the tail of `log` when given."""
    end = time.monotonic() + timeout_s
    last: object = None
    while True:
        try:
            last = predicate()
        except Exception as exc:  # noqa: BLE001 -- the condition is simply not true yet
            last = exc
        if last and not isinstance(last, Exception):
            return last  # type: ignore[return-value]
        if time.monotonic() >= end:
            break
        time.sleep(poll_s)
    tail = log.read_text(errors="replace")[-3000:] if log and log.exists() else ""
    raise AssertionError(f"{what} not reached within {timeout_s:g}s (last: {last!r})" + (f"\n{tail}" if tail else ""))


def wait_healthy(url: str, proc, timeout_s: float = 180.0) -> None:
    """Until GET `url` answers 200; fail at once, naming the exit code, if `proc` exits first."""

    def answered():
        if proc.poll() is not None:
            return "exited"
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status == 200

    if wait_until(answered, timeout_s, f"{url} healthy", poll_s=0.5) == "exited":
        raise AssertionError(f"the process behind {url} exited with {proc.returncode} before it was healthy")
