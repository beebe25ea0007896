"""`python -m guards.ready_gate NAME...`: wait until every named headless Service has a Ready pod.

Compose starts the trainer only when the engine and tunnel-check are healthy (`depends_on:
service_healthy`). On Kubernetes the same health commands are the pods' readiness probes, and a headless
Service without `publishNotReadyAddresses` resolves in cluster DNS only to pods whose probes pass. So
the trainer's init step waits on name resolution: no API access (no ServiceAccount token, no RBAC), and
nothing here re-implements a probe. It waits as long as it takes, like `depends_on` (the engine may
spend half an hour downloading the model), and says every REPORT_EVERY_S what it is still waiting for.
"""

from __future__ import annotations

import socket
import sys
import time
from collections.abc import Callable, Iterable

POLL_S = 2.0
REPORT_EVERY_S = 30.0


def resolves(name: str) -> bool:
    try:
        return bool(socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP))
    except (socket.gaierror, UnicodeError):
        return False


def wait(
    names: Iterable[str],
    *,
    ready: Callable[[str], bool] = resolves,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    say: Callable[[str], None] = print,
    timeout_s: float | None = None,
) -> bool:
    """True once every name is ready (each stays ready once seen: the gate is for the start only, as
    depends_on is); False when `timeout_s` passes first."""
    waiting = list(dict.fromkeys(names))
    start = last_report = clock()
    while True:
        waiting = [name for name in waiting if not ready(name)]
        now = clock()
        if not waiting:
            say(f"ready-gate: all ready after {now - start:.0f}s")
            return True
        if timeout_s is not None and now - start >= timeout_s:
            say(f"ready-gate: gave up after {now - start:.0f}s; not ready: {', '.join(waiting)}")
            return False
        if now - last_report >= REPORT_EVERY_S or now == start:
            say(
                f"ready-gate: waiting {now - start:.0f}s for {', '.join(waiting)} (no Ready pod yet: "
                "`kubectl describe pod` shows the failing readiness probe)"
            )
            last_report = now
        sleep(POLL_S)


def main(argv: list[str] | None = None) -> int:
    names = sys.argv[1:] if argv is None else argv
    if not names:
        print("usage: python -m guards.ready_gate SERVICE [SERVICE...]", file=sys.stderr)
        return 2
    return 0 if wait(names) else 1


if __name__ == "__main__":
    sys.exit(main())
