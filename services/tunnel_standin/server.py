"""The stand-in: a public side that forwards to the capture proxy, and cloudflared's loopback
metrics side (`/quicktunnel`, `/ready`) plus admin routes that make it fail on purpose.

Failure modes, each what a real tunnel does (see pages.py):
    forward   forward every request to 127.0.0.1:<capture port>, streaming both bodies
    502       answer every request with the dead-origin HTML page (tunnel up, origin not answering)
    530       answer with the error-1033 page (tunnel not connected); /ready turns 503
    die       the process exits at once, as a crashed cloudflared would
    target    forward to another loopback port (a second proxy instance behind the same URL)

Set through the metrics port (loopback only): POST /admin/mode/<forward|502|530>, POST /admin/die,
POST /admin/target/<port>. Or by signal: SIGUSR1 -> 530, SIGUSR2 -> 502, SIGHUP -> forward,
SIGTERM/SIGINT -> graceful exit.

A plain ASGI app under uvicorn, with httpx streaming the upstream: an LLM call through a tunnel
streams server-sent events, and a forwarder that buffered them would hide the very latency and
disconnect behaviour the CPU form exists to exercise.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import socket
import uuid
from dataclasses import dataclass, field

import httpx
import uvicorn

from . import pages
from .announce import Announcer

log = logging.getLogger("tunnel_standin")

# RFC 9110 hop-by-hop headers, plus Host (the next hop's is 127.0.0.1). Content-Length is kept
# both ways: bodies are relayed byte for byte (aiter_raw, no re-encoding), so it stays true.
_HOP = {
    b"connection",
    b"keep-alive",
    b"proxy-authenticate",
    b"proxy-authorization",
    b"te",
    b"trailer",
    b"transfer-encoding",
    b"upgrade",
    b"host",
}


@dataclass
class State:
    url: str  # what the stand-in announces, http://<listen host>:<port>
    capture_port: int
    target_port: int
    mode: str = "forward"
    connection: str = field(default_factory=lambda: str(uuid.uuid4()))

    @property
    def host(self) -> str:
        return self.url.split("://", 1)[1]


class Standin:
    def __init__(self, state: State, announcer: Announcer):
        self.state = state
        self.say = announcer
        self.client = httpx.AsyncClient(
            timeout=httpx.Timeout(connect=5.0, read=900.0, write=60.0, pool=None),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
        )
        self.servers: list[uvicorn.Server] = []

    # -- modes ------------------------------------------------------------------------------------
    def set_mode(self, mode: str) -> None:
        old, self.state.mode = self.state.mode, mode
        if old == mode:
            return
        if mode == "530":
            self.say.log("info", "Unregistered tunnel connection", connIndex=0, event=0, ip="127.0.0.1")
            self.say.log("warn", "Serve tunnel error", error="told to disconnect (stand-in mode 530)", connIndex=0)
        elif old == "530":
            self._registered()
        if mode == "502":
            self.say.log("error", "stand-in mode 502: answering every request as an unreachable origin")

    def set_target(self, port: int) -> None:
        self.state.target_port = port
        self.say.log("warn", f"stand-in now forwards to 127.0.0.1:{port} (capture port is {self.state.capture_port})")

    def die(self) -> None:
        self.say.log("error", "stand-in told to die: exiting without shutdown, as a crashed cloudflared would")
        os._exit(1)

    def _registered(self) -> None:
        self.say.log(
            "info",
            "Registered tunnel connection",
            connIndex=0,
            connection=self.state.connection,
            event=0,
            ip="127.0.0.1",
            location="local",
            protocol="http",
        )

    # -- the public side ----------------------------------------------------------------------------
    async def public(self, scope, receive, send) -> None:
        if scope["type"] == "lifespan":
            return await _lifespan(receive, send)
        if scope["type"] != "http":
            return
        mode = self.state.mode
        if mode == "502":
            return await _respond(send, *pages.bad_gateway(self.state.host))
        if mode == "530":
            return await _respond(send, *pages.tunnel_error(self.state.host))
        await self._forward(scope, receive, send)

    async def _forward(self, scope, receive, send) -> None:
        path = scope.get("raw_path") or scope["path"].encode()
        query = scope.get("query_string") or b""
        url = f"http://127.0.0.1:{self.state.target_port}{path.decode('latin-1')}"
        if query:
            url += "?" + query.decode("latin-1")
        headers = [(k, v) for k, v in scope["headers"] if k.lower() not in _HOP]
        client_ip = (scope.get("client") or ("", 0))[0]
        headers += [
            (b"x-forwarded-for", client_ip.encode()),
            (b"x-forwarded-proto", b"http"),
            (b"cf-connecting-ip", client_ip.encode()),
        ]

        async def body():
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return
                if message.get("body"):
                    yield message["body"]
                if not message.get("more_body"):
                    return

        has_body = any(k.lower() in (b"content-length", b"transfer-encoding") for k, _ in scope["headers"])
        request = self.client.build_request(scope["method"], url, headers=headers, content=body() if has_body else None)
        try:
            upstream = await self.client.send(request, stream=True)
        except httpx.HTTPError as exc:
            # What cloudflared does when its origin refuses: the edge serves a 502 page.
            self.say.log(
                "error",
                "Request failed",
                error=f"Unable to reach the origin service: {exc}",
                connIndex=0,
                dest=url,
                originService=f"http://127.0.0.1:{self.state.target_port}",
            )
            return await _respond(send, *pages.bad_gateway(self.state.host))
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": upstream.status_code,
                    "headers": [(k, v) for k, v in upstream.headers.raw if k.lower() not in _HOP],
                }
            )
            async for chunk in upstream.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await upstream.aclose()

    # -- the loopback metrics/admin side ------------------------------------------------------------
    async def metrics(self, scope, receive, send) -> None:
        if scope["type"] == "lifespan":
            return await _lifespan(receive, send)
        if scope["type"] != "http":
            return
        method, path = scope["method"], scope["path"].rstrip("/")
        connected = self.state.mode != "530"
        if method == "GET" and path == "/quicktunnel":
            # cloudflared answers {"hostname": "<host>"} and its own code prefixes https:// only when
            # the value has no scheme; the stand-in has no TLS, so it says http:// explicitly.
            return await _json(send, 200, {"hostname": self.state.url})
        if method == "GET" and path == "/ready":
            status = 200 if connected else 503
            return await _json(send, status, {"status": status, "readyConnections": int(connected)})
        if method == "GET" and path == "/metrics":
            text = (
                "# stand-in: only the gauges a readiness probe would look at\n"
                f"cloudflared_tunnel_ha_connections {int(connected)}\n"
            )
            return await _respond(send, 200, text, b"text/plain; version=0.0.4")
        if method == "POST" and path.startswith("/admin/mode/"):
            mode = path.rsplit("/", 1)[1]
            if mode not in ("forward", "502", "530"):
                return await _json(send, 400, {"error": f"mode {mode!r}: use forward, 502 or 530"})
            self.set_mode(mode)
            return await _json(send, 200, {"mode": mode})
        if method == "POST" and path.startswith("/admin/target/"):
            port = path.rsplit("/", 1)[1]
            if not port.isdigit() or not 0 < int(port) < 65536:
                return await _json(send, 400, {"error": f"target {port!r} is not a TCP port"})
            self.set_target(int(port))
            return await _json(send, 200, {"target": f"127.0.0.1:{port}"})
        if method == "POST" and path == "/admin/die":
            await _json(send, 200, {"dying": True})
            asyncio.get_running_loop().call_later(0.05, self.die)
            return
        if method == "GET" and path == "/admin/state":
            return await _json(
                send, 200, {"url": self.state.url, "mode": self.state.mode, "target_port": self.state.target_port}
            )
        return await _json(send, 404, {"error": f"no route {method} {path}"})

    # -- running ----------------------------------------------------------------------------------
    async def serve(self, public_sock: socket.socket, metrics_sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        for sig, action in (
            (signal.SIGUSR1, lambda: self.set_mode("530")),
            (signal.SIGUSR2, lambda: self.set_mode("502")),
            (signal.SIGHUP, lambda: self.set_mode("forward")),
            (signal.SIGTERM, self.shutdown),
            (signal.SIGINT, self.shutdown),
        ):
            loop.add_signal_handler(sig, action)
        for app, _sock in ((self.public, public_sock), (self.metrics, metrics_sock)):
            config = uvicorn.Config(
                app,
                interface="asgi3",
                log_level="warning",
                lifespan="on",
                server_header=False,
                timeout_graceful_shutdown=5,
            )
            self.servers.append(_Server(config))
        self._registered()
        try:
            await asyncio.gather(
                self.servers[0].serve(sockets=[public_sock]), self.servers[1].serve(sockets=[metrics_sock])
            )
        finally:
            await self.client.aclose()

    def shutdown(self) -> None:
        self.say.log("info", "Initiating graceful shutdown due to signal terminated ...")
        for server in self.servers:
            server.should_exit = True


class _Server(uvicorn.Server):
    """Two servers share one loop; the stand-in owns the signals, not each server."""

    def capture_signals(self):
        import contextlib

        return contextlib.nullcontext()


async def _lifespan(receive, send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def _respond(send, status: int, body: str, ctype: bytes = b"text/html; charset=UTF-8") -> None:
    data = body.encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", ctype),
                (b"content-length", str(len(data)).encode()),
                (b"server", b"cloudflare"),
                (b"cache-control", b"private, max-age=0, no-store"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})


async def _json(send, status: int, doc: dict) -> None:
    await _respond(send, status, json.dumps(doc), b"application/json")
