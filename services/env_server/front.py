"""The public front of the capture proxy: the one surface the tunnel publishes, treated as hostile ground.

OpenEnv 0.10.0's capture app (`openenv.core.harness.capture.server.create_app`) is written for a private
port. Measured on it behind a public URL: an unauthenticated 80 MB POST was read whole before the 401
(the proxy route calls `request.json()` first, then resolves the key), growing env-server from 369 MB to
591 MB RSS; `/docs`, `/openapi.json` and `/v1/models` answered anyone; `/health` named the upstream URL
and the model. Every sandbox holds the URL, and the process it would exhaust runs every rollout.

This ASGI layer sits in front of the app and decides from the request line and headers alone, before
one body byte is read:

  route        GET /health and POST /v1/chat/completions (what mini-swe-agent 2.4.6 calls: litellm's
               `openai/` provider posts to `<OPENAI_API_BASE>/chat/completions`, and OpenEnv's seam sets
               that base to `<url>/v1`); OpenEnv's `/sessions*` control plane and the full `/health` only
               with the capture admin key. Everything else is 404, without a word about why.
  key          a chat completion must carry a live session id (the rollout's key) or it is refused 401.
  concurrency  at most `max_concurrent` model calls in flight; beyond it 429 at once (the agent's
               litellm retries), so a flood queues nothing in this process.
  size         a declared Content-Length over `max_body_bytes` is 413 at once; a chunked body is counted
               while it is read and refused the moment it passes the cap, never buffered past it.
  time         the whole body must arrive within `body_timeout_s` of the headers, or the request is 408
               and the connection closed (the headers' own deadline and the connection ceiling are
               `conn_guard.py`'s, below the ASGI layer).
  JSON         a body that is not JSON, not an object, or nested deeper than MAX_JSON_DEPTH is 400 with
               one log line. Measured before this: 100k levels of `[` with a valid key was a 500 and a
               RecursionError traceback in the log per request (json.loads raises RecursionError, not
               ValueError, and a body just under the interpreter's limit parses, then recurses again in
               every later json.dumps and pydantic pass).
  fields       the body is handed on with only the fields an agent call needs (`chat_fields.clean_chat`):
               sampling is the run's, set by OpenEnv from the session, never the request's; the output
               length is capped to the run's per-turn bound (`chat_fields.cap_output`).

A refusal closes the connection with the body unread; uvicorn stops reading a socket whose request
body nobody consumes, so a large body costs this process next to nothing.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from .chat_fields import cap_output, clean_chat

log = logging.getLogger("env_server.front")

HEALTH = "/health"
CHAT = "/v1/chat/completions"
ADMIN_PREFIX = "/sessions"
# An agent's chat body is a list of messages with content parts and tool schemas: about 8 levels deep.
MAX_JSON_DEPTH = 64
# A chat body is at most CAPTURE_MAX_BODY_MB (8 MB); 60 s is 140 KB/s for the largest, and a typical
# 150 KB body needs 2.5 KB/s. A slower one holds a model-call slot for nothing.
BODY_TIMEOUT_S = 60.0
# Bad-body lines: the first of a kind at once, then at most one per this many seconds with a count, so a
# flood of junk cannot become a flood of log lines.
LOG_EVERY_S = 60.0

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


def offered_key(headers: list[tuple[bytes, bytes]]) -> str:
    """The caller's key where every OpenAI/Anthropic/Google SDK puts it (as OpenEnv's `extract_api_key`)."""
    found = {}
    for name, value in headers:
        lname = name.decode("latin-1").lower()
        if lname in ("authorization", "x-api-key", "x-goog-api-key"):
            found[lname] = value.decode("latin-1")
    auth = found.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return found.get("x-api-key") or found.get("x-goog-api-key") or ""


def declared_length(headers: list[tuple[bytes, bytes]]) -> int | None:
    for name, value in headers:
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


class BodyTooLarge(Exception):
    pass


class BodyTooSlow(Exception):
    pass


def too_deep(doc: Any, limit: int) -> bool:
    """Whether any value in `doc` sits more than `limit` containers deep (iterative: no recursion to exhaust)."""
    stack = [(doc, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def parse_object(body: bytes) -> tuple[dict[str, Any] | None, str]:
    """(the JSON object, "") or (None, why it is refused)."""
    try:
        doc = json.loads(body)
    except RecursionError:
        return None, f"JSON nested deeper than this interpreter parses (the limit is {MAX_JSON_DEPTH} levels)"
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
        return (
            None,
            f"body is not JSON ({type(exc).__name__} at byte {getattr(exc, 'pos', getattr(exc, 'start', '?'))})",
        )
    if not isinstance(doc, dict):
        return None, "body must be a JSON object"
    if too_deep(doc, MAX_JSON_DEPTH):
        return None, f"JSON nested deeper than {MAX_JSON_DEPTH} levels"
    return doc, ""


class PublicFront:
    """ASGI middleware around OpenEnv's capture app. See the module docstring for the rules."""

    def __init__(
        self,
        app: Any,
        *,
        instance_id: str,
        is_session: Callable[[str], bool],
        admin_key: str | None,
        max_body_bytes: int,
        max_concurrent: int,
        max_output_tokens: int | None = None,
        body_timeout_s: float = BODY_TIMEOUT_S,
    ) -> None:
        self.app = app
        self.instance_id = instance_id
        self.is_session = is_session
        self.admin_key = admin_key or ""
        self.max_body_bytes = max_body_bytes
        self.max_concurrent = max_concurrent
        self.max_output_tokens = max_output_tokens
        self.body_timeout_s = body_timeout_s
        self.inflight = 0
        # What was refused and why, for the loopback status route (never logged per request: a flood
        # must not become a flood of log lines).
        self.refused: Counter[str] = Counter()
        self.fields_dropped: Counter[str] = Counter()
        self.output_capped: Counter[str] = Counter()  # output-length fields set to the run's bound
        self._logged: dict[str, tuple[float, int]] = {}  # why -> (when last logged, refusals since)

    def _is_admin(self, key: str) -> bool:
        return bool(self.admin_key) and secrets.compare_digest(key.encode(), self.admin_key.encode())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http":
            # No websocket route exists on the public port.
            self.refused["not http"] += 1
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1008})
            return
        method, path = scope["method"], scope["path"]
        headers = scope.get("headers") or []
        key = offered_key(headers)

        if path == HEALTH and method == "GET":
            if self._is_admin(key):
                await self.app(scope, receive, send)  # OpenEnv's full document, for the operator
            else:
                await _json(send, 200, {"status": "ok", "instance": self.instance_id})
            return
        if path == ADMIN_PREFIX or path.startswith(ADMIN_PREFIX + "/"):
            if not self._is_admin(key):
                return await self._refuse(send, 404, "not found", "admin route without the admin key")
            await self._forward_capped(scope, receive, send, clean=False)
            return
        if path != CHAT or method != "POST":
            return await self._refuse(send, 404, "not found", "unknown route")
        if not key or not self.is_session(key):
            return await self._refuse(
                send,
                401,
                "unknown API key: this port serves only the rollout sessions of this env server",
                "no live session key",
            )
        if self.inflight >= self.max_concurrent:
            return await self._refuse(
                send,
                429,
                f"too many model calls in flight ({self.max_concurrent}, CAPTURE_MAX_CONCURRENT); retry shortly",
                "concurrency ceiling",
                extra_headers=[(b"retry-after", b"1")],
            )
        self.inflight += 1
        try:
            await self._forward_capped(scope, receive, send, clean=True)
        finally:
            self.inflight -= 1

    async def _forward_capped(self, scope: Scope, receive: Receive, send: Send, *, clean: bool) -> None:
        headers = scope.get("headers") or []
        declared = declared_length(headers)
        if declared is not None and declared > self.max_body_bytes:
            return await self._too_large(send)
        try:
            body = await self._read_capped(receive)
        except BodyTooLarge:
            return await self._too_large(send)
        except BodyTooSlow:
            return await self._refuse(
                send, 408, f"request body did not arrive within {self.body_timeout_s:.0f} s", "body not in time"
            )
        except _Disconnected:
            return
        if clean:
            doc, why = parse_object(body)
            if doc is None:
                self._log_once("bad body", f"{why}; answered 400")
                return await self._refuse(send, 400, why, "body not a JSON object")
            doc, dropped = clean_chat(doc)
            self.fields_dropped.update(dropped)
            self.output_capped.update(cap_output(doc, self.max_output_tokens))
            body = json.dumps(doc).encode()
        scope = dict(scope)
        scope["headers"] = [(n, v) for n, v in headers if n.lower() not in (b"content-length", b"transfer-encoding")]
        scope["headers"].append((b"content-length", str(len(body)).encode()))
        sent = False

        async def replay() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            # Afterwards only the disconnect can come; OpenEnv's streaming replies listen for it.
            return await receive()

        await self.app(scope, replay, send)

    async def _read_capped(self, receive: Receive) -> bytes:
        chunks: list[bytes] = []
        size = 0
        deadline = time.monotonic() + self.body_timeout_s
        while True:
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                raise BodyTooSlow from None
            if message["type"] == "http.disconnect":
                raise _Disconnected
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                raise BodyTooLarge
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def _too_large(self, send: Send) -> None:
        mb = self.max_body_bytes / 1024 / 1024
        await self._refuse(
            send, 413, f"request body over {mb:.0f} MB (CAPTURE_MAX_BODY_MB): refused unread", "body over the cap"
        )

    def _log_once(self, why: str, line: str) -> None:
        now = time.monotonic()
        last, since = self._logged.get(why, (float("-inf"), 0))
        if now - last < LOG_EVERY_S:
            self._logged[why] = (last, since + 1)
            return
        more = f" (+{since} more since the last such line)" if since else ""
        log.warning("capture port: %s%s", line, more)
        self._logged[why] = (now, 0)

    async def _refuse(
        self, send: Send, status: int, message: str, why: str, extra_headers: list[tuple[bytes, bytes]] = ()
    ) -> None:
        self.refused[why] += 1
        # `connection: close`: the request body (if any) is never read, so the connection cannot be reused.
        await _json(send, status, {"error": {"message": message}}, [(b"connection", b"close"), *extra_headers])


class _Disconnected(Exception):
    pass


async def _json(send: Send, status: int, doc: dict[str, Any], extra: list[tuple[bytes, bytes]] = ()) -> None:
    body = json.dumps(doc).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *extra],
        }
    )
    await send({"type": "http.response.body", "body": body})
