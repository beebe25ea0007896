"""A step still running when its websocket client disconnects is cancelled; an idle endpoint is left alone."""

import asyncio

from env_server.client_watch import CancelOnDisconnect


def run(app_step_s: float, disconnect_after_s: float):
    events = []

    async def endpoint(scope, receive, send):
        assert (await receive())["type"] == "websocket.connect"
        try:
            await receive()  # a step message
            events.append("step started")
            await asyncio.sleep(app_step_s)  # the rollout
            events.append("step finished")
            await receive()  # takes the disconnect itself when idle
            events.append("endpoint saw the disconnect")
        except asyncio.CancelledError:
            events.append("step cancelled")
            raise

    async def scenario():
        client = asyncio.Queue()
        for m in ({"type": "websocket.connect"}, {"type": "websocket.receive", "text": "step"}):
            client.put_nowait(m)
        app = CancelOnDisconnect(endpoint, on_cancel=lambda path: events.append(f"on_cancel {path}"))

        async def drop_client():
            await asyncio.sleep(disconnect_after_s)
            await client.put({"type": "websocket.disconnect", "code": 1006})

        asyncio.ensure_future(drop_client())
        served = asyncio.ensure_future(app({"type": "websocket", "path": "/ws"}, client.get, None))
        done, _ = await asyncio.wait({served}, timeout=3)
        if not done:  # a 60 s step still running: the client's departure changed nothing
            events.append("still running")
            served.cancel()

    asyncio.run(scenario())
    return events


def test_a_rollout_whose_client_is_gone_is_cancelled():
    assert run(app_step_s=60, disconnect_after_s=0.1) == [
        "step started",
        "on_cancel /ws",
        "step cancelled",
    ]


def test_an_idle_endpoint_takes_the_disconnect_itself():
    assert run(app_step_s=0.05, disconnect_after_s=0.2) == [
        "step started",
        "step finished",
        "endpoint saw the disconnect",
    ]
