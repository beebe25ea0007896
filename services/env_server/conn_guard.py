"""The capture port's connections: headers that must arrive in time, and a bound on how many stay open.

Read at uvicorn 0.54.0 (`protocols/http/h11_impl.py`) with h11 0.16.0. What uvicorn offers, and where it
stops short for a port the internet reaches:

  timeout_keep_alive        armed only after a response completed (`on_response_complete`) and cancelled
                            by any byte (`data_received`): a client that sends its headers one byte a
                            second is never timed out, and a fresh connection has no timer at all.
  limit_concurrency         counted when a request's headers are complete, against open connections:
                            100 slow senders holding connections made every *complete* request (/health,
                            the agents' calls) a 503, the opposite of shedding the slow ones.
  h11_max_incomplete_event_size   bounds the header block's size (h11's 16 KiB): kept, stated here.

So the protocol below adds, per connection: a deadline for each request's headers (from the connect, or
from the end of the previous response), after which the socket is answered 408 and closed; and a ceiling
on open connections that, when a new one arrives over it, closes the connection that has waited longest
for its headers (a slow sender or an idle keep-alive, once it has waited SHED_AFTER_S) rather than the
newcomer, so a caller that sends its request at once is served while a flood of half-open requests is
shed. Only when no open connection has been waiting that long (all busy with requests, or all just
connected in one burst) is the newcomer refused (503). The body's own deadline is the ASGI layer's
(`front.PublicFront`, which reads the body).

The uvicorn protocol is pinned to h11 (`http=` takes the class): `auto` picks httptools where installed,
and these hooks are h11's.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

# A request's headers are a few hundred bytes; a caller that has not sent them in this long is not an agent.
HEADER_TIMEOUT_S = 10.0
# A connection that connected in the same burst as the newcomer is not slow yet; one this late is.
SHED_AFTER_S = 1.0
# h11's own default, stated: a header block larger than this is a 400 from uvicorn.
MAX_HEADER_BYTES = 16 * 1024


def _raw_reply(status: int, reason: str, message: str) -> bytes:
    body = ('{"error": {"message": "' + message + '"}}').encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\nconnection: close\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


HEADERS_TOO_SLOW = _raw_reply(408, "Request Timeout", "request headers did not arrive in time")
FULL = _raw_reply(503, "Service Unavailable", "too many open connections; retry shortly")


def guarded_protocol(
    *, header_timeout_s: float, max_connections: int, refused: Counter, shed_after_s: float = SHED_AFTER_S
) -> type[H11Protocol]:
    """uvicorn's h11 protocol with the header deadline and the connection ceiling; `refused` counts both
    (the front's counter, shown on the Task API's /stack/status; never logged per connection)."""

    class GuardedH11Protocol(H11Protocol):
        _header_timer: asyncio.TimerHandle | None = None
        # When this connection began waiting for a request's headers; None while a request is served.
        waiting_since: float | None = None

        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()
            # Connections being closed are still in the set until the loop calls connection_lost.
            if sum(1 for c in self.connections if not c.transport.is_closing()) > max_connections:
                self._make_room()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def handle_events(self) -> None:
            cycle = self.cycle
            super().handle_events()
            if self.cycle is not cycle:  # a request's headers arrived: its body has the front's deadline
                self._disarm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            # Not when a pipelined request already started (its cycle is running) or the socket closes.
            if not self.transport.is_closing() and (self.cycle is None or self.cycle.response_complete):
                self._arm()

        def _arm(self) -> None:
            self._disarm()
            self.waiting_since = time.monotonic()
            self._header_timer = self.loop.call_later(header_timeout_s, self._headers_too_slow)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None
            self.waiting_since = None

        def _headers_too_slow(self) -> None:
            self._header_timer = None
            if self.transport.is_closing():
                return
            refused["headers not in time"] += 1
            self._close(HEADERS_TOO_SLOW)

        def _make_room(self) -> None:
            slow_since = time.monotonic() - shed_after_s
            waiting = [
                c
                for c in self.connections
                if c is not self
                and isinstance(c, GuardedH11Protocol)
                and c.waiting_since is not None
                and c.waiting_since <= slow_since
                and not c.transport.is_closing()
            ]
            if waiting:
                refused["connection ceiling: longest-waiting connection shed"] += 1
                min(waiting, key=lambda c: c.waiting_since).shed()
            else:
                refused["connection ceiling: every connection busy"] += 1
                self._close(FULL)

        def shed(self) -> None:
            self._close(HEADERS_TOO_SLOW)

        def _close(self, reply: bytes) -> None:
            self._disarm()
            try:
                self.transport.write(reply)
            finally:
                self.transport.close()

    return GuardedH11Protocol
