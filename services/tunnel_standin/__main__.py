"""`python -m tunnel_standin`: bind, announce like cloudflared, forward until told otherwise.

Environment:
    CAPTURE_PORT           the only target: 127.0.0.1:<port> (default 8100)
    STANDIN_LISTEN_HOST    sandbox-reachable address (empty/auto: the docker0 address; never 0.0.0.0)
    STANDIN_PORT           public port; empty or 0 picks a free one, so every start announces a NEW
                           URL, as a restarted quick tunnel does
    TUNNEL_METRICS_PORT    loopback metrics/admin port (default 20241)
    TUNNEL_LOG             file to append cloudflared-format JSON log lines to (optional)
"""

from __future__ import annotations

import asyncio
import socket
import sys

from stack import fields
from stack.env import Env, EnvError, Field, Table

from .address import AddressError, listen_host
from .announce import Announcer
from .server import Standin, State

FIELDS = Table(
    fields.CAPTURE_PORT,
    fields.TUNNEL_METRICS_PORT,
    Field("STANDIN_LISTEN_HOST", "text", "", "sandbox-reachable address; empty: the docker0 address"),
    # 0 (or empty): a free port on each start, as a restarted quick tunnel gets a new hostname.
    Field("STANDIN_PORT", "integer", 0, "public port; 0 or empty: a free one per start", minimum=0, maximum=65535),
    fields.TUNNEL_LOG,
)


def _bind(host: str, port: int, what: str, fix: str) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise SystemExit(f"tunnel-standin: cannot bind {what} {host}:{port} ({exc.strerror}); {fix}") from None
    sock.listen(1024)
    sock.setblocking(False)
    return sock


def main(env: dict | None = None) -> int:
    import os

    env = dict(os.environ if env is None else env)
    read = Env(env, collect=True)
    try:
        host = listen_host(read.get(FIELDS["STANDIN_LISTEN_HOST"]) or None)
    except AddressError as exc:
        print(f"tunnel-standin: {exc}", file=sys.stderr)
        return 2
    capture_port = read.get(FIELDS["CAPTURE_PORT"])
    metrics_port = read.get(FIELDS["TUNNEL_METRICS_PORT"])
    public_port = read.get(FIELDS["STANDIN_PORT"])
    try:
        read.check()
    except EnvError as exc:
        for line in str(exc).splitlines():
            print(f"tunnel-standin: {line}", file=sys.stderr)
        return 2
    public = _bind(host, public_port, "the public side", "set STANDIN_PORT to a free port")
    metrics = _bind("127.0.0.1", metrics_port, "the metrics side", "set TUNNEL_METRICS_PORT to a free port")
    bound_host, bound_port = public.getsockname()[:2]
    url = f"http://[{bound_host}]:{bound_port}" if ":" in bound_host else f"http://{bound_host}:{bound_port}"

    say = Announcer(read.get(FIELDS["TUNNEL_LOG"]) or None)
    say.log(
        "info",
        "Local tunnel stand-in (CPU form, not cloudflared): forwards to the capture proxy only",
        target=f"http://127.0.0.1:{capture_port}",
    )
    say.log("info", f"Starting metrics server on 127.0.0.1:{metrics_port}/metrics")
    say.banner(url)
    standin = Standin(State(url=url, capture_port=capture_port, target_port=capture_port), say)
    asyncio.run(standin.serve(public, metrics))
    return 0


if __name__ == "__main__":
    sys.exit(main())
