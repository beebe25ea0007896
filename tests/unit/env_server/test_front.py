"""The public front: every refusal is decided from the request line and headers, before a body byte is read.

Driven at the ASGI level with a `receive` that records every read, so "before the body" is asserted, not
assumed. The app behind the front is a recorder standing in for OpenEnv's capture app (the real one,
behind this same front, is exercised in tests/integration/env_server_guards).
"""

from __future__ import annotations

import asyncio
import json

import pytest

from env_server.front import PublicFront

SESSION = "s-live-session"
ADMIN = "admin-key-123"
CAP = 1024


class Inner:
    def __init__(self) -> None:
        self.calls: list[tuple[str, bytes, dict]] = []
        self.release = asyncio.Event()
        self.block = False

    async def __call__(self, scope, receive, send):
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        self.calls.append((scope["path"], body, dict(scope["headers"])))
        if self.block:
            await self.release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"inner"})


def front(inner, **kw) -> PublicFront:
    args = dict(
        instance_id="inst-1",
        is_session=lambda key: key == SESSION,
        admin_key=ADMIN,
        max_body_bytes=CAP,
        max_concurrent=2,
    )
    args.update(kw)
    return PublicFront(inner, **args)


def call(app, method, path, *, key=None, chunks=(b"",), length=None, extra=()):
    headers = [(b"host", b"x")]
    if key:
        headers.append((b"authorization", f"Bearer {key}".encode()))
    if length is not None:
        headers.append((b"content-length", str(length).encode()))
    headers += list(extra)
    scope = {"type": "http", "method": method, "path": path, "headers": headers, "query_string": b""}
    reads = []
    pending = list(chunks)

    async def receive():
        reads.append(1)
        if pending:
            chunk = pending.pop(0)
            return {"type": "http.request", "body": chunk, "more_body": bool(pending)}
        await asyncio.sleep(3600)

    sent = []

    async def send(message):
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    status = sent[0]["status"]
    body = b"".join(m.get("body", b"") for m in sent[1:])
    return status, body, len(reads)


@pytest.mark.parametrize(
    "method, path",
    [
        ("GET", "/docs"),
        ("GET", "/openapi.json"),
        ("GET", "/v1/models"),
        ("GET", "/v1/chat/completions"),
        ("POST", "/v1/messages"),
        ("POST", "/v1/responses"),
        ("POST", "/chat/completions"),
        ("GET", "/sessions"),
    ],
)
def test_only_the_agents_routes_exist(method, path):
    inner = Inner()
    status, body, reads = call(front(inner), method, path, key=SESSION, chunks=(b"{}",))
    assert (status, json.loads(body)) == (404, {"error": {"message": "not found"}})
    assert reads == 0 and inner.calls == []


def test_unknown_key_is_refused_before_the_body_is_read():
    inner = Inner()
    app = front(inner)
    status, body, reads = call(app, "POST", "/v1/chat/completions", key="guess", chunks=(b"x" * 10_000,))
    assert status == 401
    assert json.loads(body)["error"]["message"] == (
        "unknown API key: this port serves only the rollout sessions of this env server"
    )
    assert reads == 0 and inner.calls == []
    assert app.refused == {"no live session key": 1}


def test_declared_length_over_the_cap_is_413_unread():
    inner = Inner()
    status, body, reads = call(front(inner), "POST", "/v1/chat/completions", key=SESSION, length=CAP + 1)
    assert status == 413
    assert json.loads(body)["error"]["message"] == "request body over 0 MB (CAPTURE_MAX_BODY_MB): refused unread"
    assert reads == 0 and inner.calls == []


def test_chunked_body_is_counted_while_read_and_refused_at_the_cap():
    inner = Inner()
    chunks = [b"a" * 600, b"b" * 600, b"c" * 600, b"d" * 600]
    status, _, reads = call(front(inner), "POST", "/v1/chat/completions", key=SESSION, chunks=chunks)
    assert status == 413
    assert reads == 2  # 600 + 600 > 1024: the third chunk is never asked for
    assert inner.calls == []


def test_a_call_reaches_the_app_with_only_the_allowed_fields_and_no_sampling():
    inner = Inner()
    app = front(inner)
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "temperature": 0.01,
        "top_p": 0.1,
        "logit_bias": {"1": 100},
        "extra_args": {"x": 1},
        "max_tokens": 5,
    }
    status, out, _ = call(app, "POST", "/v1/chat/completions", key=SESSION, chunks=(json.dumps(body).encode(),))
    assert (status, out) == (200, b"inner")
    path, seen, headers = inner.calls[0]
    assert json.loads(seen) == {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
    assert headers[b"content-length"] == str(len(seen)).encode()
    assert app.fields_dropped == {"temperature": 1, "top_p": 1, "logit_bias": 1, "extra_args": 1}


def test_public_health_proves_the_instance_and_says_nothing_else():
    inner = Inner()
    status, body, _ = call(front(inner), "GET", "/health")
    assert (status, json.loads(body)) == (200, {"status": "ok", "instance": "inst-1"})
    assert inner.calls == []


def test_admin_key_reaches_openenvs_own_health_and_sessions():
    inner = Inner()
    app = front(inner)
    assert call(app, "GET", "/health", key=ADMIN)[:2] == (200, b"inner")
    assert call(app, "GET", "/sessions", key=ADMIN)[:2] == (200, b"inner")
    assert call(app, "GET", "/sessions/abc/rollout", key=ADMIN)[:2] == (200, b"inner")


def test_no_admin_key_configured_means_no_admin_routes():
    inner = Inner()
    assert call(front(inner, admin_key=None), "GET", "/sessions", key="")[0] == 404


def test_calls_beyond_the_ceiling_get_429_at_once():
    inner = Inner()
    inner.block = True
    app = front(inner, max_concurrent=2)
    body = json.dumps({"messages": []}).encode()

    async def scenario():
        results = []

        async def one():
            sent = []
            pending = [body]

            async def receive():
                if pending:
                    return {"type": "http.request", "body": pending.pop(), "more_body": False}
                await asyncio.sleep(3600)

            async def send(m):
                sent.append(m)

            scope = {
                "type": "http",
                "method": "POST",
                "path": "/v1/chat/completions",
                "headers": [(b"authorization", f"Bearer {SESSION}".encode())],
            }
            await app(scope, receive, send)
            results.append(sent[0]["status"])

        held = [asyncio.create_task(one()) for _ in range(2)]
        await asyncio.sleep(0.05)
        # The third, while two are in flight: refused at once (a broken ceiling would hang here).
        await asyncio.wait_for(one(), timeout=2)
        assert results == [429]
        inner.release.set()
        await asyncio.gather(*held)
        await one()  # and served again once they are done
        return results

    assert asyncio.run(scenario()) == [429, 200, 200, 200]


def test_a_too_deep_body_is_400_and_logged_once_without_a_traceback(caplog):
    inner = Inner()
    app = front(inner, max_body_bytes=1024 * 1024)
    deep = b'{"messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    with caplog.at_level("WARNING", logger="env_server.front"):
        for _ in range(3):
            status, body, _ = call(app, "POST", "/v1/chat/completions", key=SESSION, chunks=(deep,))
            assert (status, json.loads(body)) == (
                400,
                {"error": {"message": "JSON nested deeper than this interpreter parses (the limit is 64 levels)"}},
            )
    assert inner.calls == []
    assert [r.getMessage() for r in caplog.records] == [
        "capture port: JSON nested deeper than this interpreter parses (the limit is 64 levels); answered 400"
    ]
    assert all(r.exc_info is None for r in caplog.records)
    assert app.refused == {"body not a JSON object": 3}


@pytest.mark.parametrize(
    "doc, refused",
    [
        ({"messages": [[[[1]]]]}, False),
        ({"messages": "[" * 70}, False),  # a string is not nesting
        (json.loads("[" * 63 + "]" * 63), None),  # an array: refused as not an object
    ],
)
def test_depth_is_counted_in_containers(doc, refused):
    from env_server.front import parse_object

    parsed, why = parse_object(json.dumps(doc).encode())
    if refused is None:
        assert (parsed, why) == (None, "body must be a JSON object")
    else:
        assert parsed == doc and why == ""


def test_sixty_five_levels_are_refused_and_sixty_four_pass():
    from env_server.front import parse_object

    def nested(levels):  # the object itself is level 1
        return b'{"a": ' + b"[" * (levels - 1) + b"]" * (levels - 1) + b"}"

    assert parse_object(nested(64))[1] == ""
    assert parse_object(nested(65)) == (None, "JSON nested deeper than 64 levels")


def test_a_body_that_stops_arriving_is_408_after_the_deadline():
    inner = Inner()
    app = front(inner, body_timeout_s=0.2)
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v1/chat/completions",
        "headers": [(b"authorization", f"Bearer {SESSION}".encode())],
    }
    pending = [b"{", b'"m']
    sent = []

    async def receive():  # two chunks of a longer body, then nothing for an hour
        if pending:
            return {"type": "http.request", "body": pending.pop(0), "more_body": True}
        await asyncio.sleep(3600)

    async def send(message):
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    assert sent[0]["status"] == 408
    assert json.loads(sent[1]["body"]) == {"error": {"message": "request body did not arrive within 0 s"}}
    assert inner.calls == [] and app.refused == {"body not in time": 1}


@pytest.mark.parametrize(
    "asked, sent, changed",
    [
        ({}, {"max_tokens": 256}, []),
        ({"max_tokens": 100}, {"max_tokens": 100}, []),
        ({"max_tokens": 256}, {"max_tokens": 256}, []),
        ({"max_tokens": 257}, {"max_tokens": 256}, ["max_tokens"]),
        ({"max_tokens": 1e9}, {"max_tokens": 256}, ["max_tokens"]),
        ({"max_tokens": "100000"}, {"max_tokens": 256}, ["max_tokens"]),
        ({"max_tokens": None}, {"max_tokens": 256}, ["max_tokens"]),
        ({"max_tokens": True}, {"max_tokens": 256}, ["max_tokens"]),
        ({"max_tokens": 0}, {"max_tokens": 256}, ["max_tokens"]),
        ({"max_completion_tokens": 10**6}, {"max_completion_tokens": 256}, ["max_completion_tokens"]),
        (
            {"max_tokens": 10**9, "max_completion_tokens": 50},
            {"max_tokens": 256, "max_completion_tokens": 50},
            ["max_tokens"],
        ),
    ],
)
def test_the_output_length_is_held_to_the_run_bound(asked, sent, changed):
    from env_server.chat_fields import cap_output

    body = {"messages": [], **asked}
    assert cap_output(body, 256) == changed
    assert body == {"messages": [], **sent}


def test_the_front_caps_the_output_length_it_hands_on():
    inner = Inner()
    app = front(inner, max_output_tokens=192)
    raw = json.dumps({"messages": [], "max_tokens": 1e9}).encode()
    assert call(app, "POST", "/v1/chat/completions", key=SESSION, chunks=(raw,))[0] == 200
    assert json.loads(inner.calls[0][1]) == {"messages": [], "max_tokens": 192}
    assert app.output_capped == {"max_tokens": 1}
