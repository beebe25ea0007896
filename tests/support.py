"""Helpers every suite needs: free loopback ports and waiting on a condition (never on a sleep).

On the path through pyproject's `pythonpath` (pytest adds tests/ for every suite, on the host and in
the images): `from support import free_port, wait_healthy, wait_until`.
"""

from __future__ import annotations

import os
import random
import socket
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


# The kernel hands out ports from this range to every `bind(0)` and every outgoing connection. A port picked
# there and released (free_ports cannot keep holding it: the caller's server binds it, often in another
# process) can be taken by any client socket on the host before the caller binds it; one outside the range
# can only be taken by a process that asks for that very number.
_EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST = 10_000  # above the well-known and common service ports (8000, 8001, 8100, 8080, ...)
_handed_out: set[int] = set()  # never the same port twice in one test process, even once it is free again
_rng = random.Random(f"{os.getpid()}-{time.time_ns()}")  # parallel test processes pick different ports


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = (int(x) for x in _EPHEMERAL.read_text().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def _bindable(sock: socket.socket, port: int) -> bool:
    try:
        sock.bind(("127.0.0.1", port))  # no SO_REUSEADDR: a port with any socket on it is not free
    except OSError:
        return False
    return True


def free_ports(n: int) -> list[int]:
    """`n` distinct loopback ports nobody holds now, outside the kernel's ephemeral range (see above), all
    bound at once while picked, and never handed out before in this process."""
    low, high = _ephemeral_range()
    socks: list[socket.socket] = []
    try:
        for _ in range(2000):  # random draws: a busy host still leaves most of ~30000 ports free
            if len(socks) == n:
                break
            port = _rng.randrange(_LOWEST, 65536)
            if low <= port <= high or port in _handed_out or any(s.getsockname()[1] == port for s in socks):
                continue
            sock = socket.socket()
            if _bindable(sock, port):
                socks.append(sock)
            else:
                sock.close()
        if len(socks) < n:
            # A host whose ephemeral range leaves nothing outside it: the kernel's pick, as before.
            for _ in range(n - len(socks)):
                sock = socket.socket()
                sock.bind(("127.0.0.1", 0))
                socks.append(sock)
        ports = [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()
    _handed_out.update(ports)
    return ports


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


def docker_missing(why: str) -> None:
    """A Docker suite without what it needs: scripts/test runs these only after building the images with a
    daemon up (ASYNCGRPO_REQUIRE_DOCKER=1), so there and in CI a missing piece fails; run by hand without
    Docker, the suite is skipped with the reason."""
    import pytest

    if os.environ.get("CI") == "true" or os.environ.get("ASYNCGRPO_REQUIRE_DOCKER") == "1":
        pytest.fail(why)
    pytest.skip(why)  # by hand only, with the reason; scripts/test and CI took the fail above
