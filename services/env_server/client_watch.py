"""A rollout whose client is gone is cancelled, so its sandbox is closed instead of running to its timeout.

The trainer drives rollouts over OpenEnv 0.10.0's `/ws` websocket (`HarborEnv` is an `EnvClient`), and
the endpoint (openenv/core/env_server/http_server.py `websocket_endpoint`) awaits each step inline: while
a rollout runs, nobody reads the socket, so a trainer that died (killed, OOM, its host gone) is noticed
only when the rollout returns, up to AGENT_TIMEOUT_S later, with the sandbox running (or billing) all
along. This ASGI layer reads the socket for the endpoint: messages are queued for it unchanged, and a
`websocket.disconnect` while the endpoint is still busy cancels it. Cancellation reaches Harbor's trial
as it does on SIGTERM (`Inflight.drain`): its shielded `environment.stop(delete=True)` closes the sandbox.
A dead peer that sent no FIN is found by uvicorn's websocket pings (20 s), which then disconnects.
"""

from __future__ import annotations

import asyncio
from typing import Any

WATCHED = ("/ws",)


class CancelOnDisconnect:
    def __init__(self, app: Any, *, on_cancel: Any = None) -> None:
        self.app = app
        self.on_cancel = on_cancel or (lambda path: None)

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "websocket" or scope.get("path") not in WATCHED:
            await self.app(scope, receive, send)
            return
        inbox: asyncio.Queue = asyncio.Queue()
        endpoint = asyncio.ensure_future(self.app(scope, inbox.get, send))
        cancelled = False

        async def pump() -> None:
            while True:
                message = await receive()
                await inbox.put(message)
                if message["type"] == "websocket.disconnect":
                    if not endpoint.done():
                        # Give the endpoint a moment to take the disconnect itself (idle between steps);
                        # one still busy after that is inside a step: a rollout nobody will read.
                        await asyncio.sleep(0.5)
                        if not endpoint.done():
                            nonlocal cancelled
                            cancelled = True
                            self.on_cancel(scope.get("path"))
                            endpoint.cancel()
                    return

        pumping = asyncio.ensure_future(pump())
        try:
            await endpoint
        except asyncio.CancelledError:
            if not cancelled:  # this connection's own task was cancelled (server exit): pass it on
                raise
        finally:
            pumping.cancel()
