"""The capture port as the internet and the sandboxes see it: OpenEnv's REAL capture app, built by
OpenEnv's HarborService inside env-server's `LoopbackHarborService`, served by its own bind behind the
front layer, in a process of its own whose RSS is measured. The one stand-in is the engine (vLLM needs a
GPU): `engine_standin.py` speaks vLLM's wire format and its 400 shape.

Figures are printed (run with -s to see them); the assertions are the issue's bounds.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from engine_standin import POISON_MARKER, serve
from openenv.harbor.contract import to_training_trace
from openenv.harbor.models import HarborRolloutResult, turns_from_document
from support import free_port

HERE = Path(__file__).resolve().parent
ADMIN = "it-admin-" + secrets.token_hex(8)
MB = 1024 * 1024
BODY_CAP_MB = 8


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


class Proxy:
    def __init__(self, tmp: Path, timing: dict | None = None) -> None:
        self.seen: list[dict] = []
        engine_port = free_port()
        self.engine = serve(engine_port, self.seen)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "OPENENV_CAPTURE_ADMIN_KEY": ADMIN, "PYTHONPATH": f"{HERE}:{os.environ['PYTHONPATH']}"}
        # The proxy's output goes to a file the tests read (its log lines are part of what they assert).
        self.log_path = tmp / "proxy.log"
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(HERE / "serve_front.py"),
                f"http://127.0.0.1:{engine_port}/v1",
                str(self.port),
                str(tmp),
                str(BODY_CAP_MB),
                "4",
                json.dumps(timing or {}),
            ],
            stdout=open(self.log_path, "w"),
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        for _ in range(3000):  # 300 s: importing OpenEnv on a loaded 2-core machine took over 60
            # Only a WHOLE first line: the image runs Python unbuffered, so print's pieces reach the file one write
            # at a time, and a full run here once read "serving http://127.0.0.1:24016" before " instance <id>" was written.
            first, newline, _ = self.log().partition("\n")
            if (newline and first.startswith("serving")) or self.proc.poll() is not None:
                break
            time.sleep(0.1)
        assert newline and first.startswith("serving") and " instance " in first, self.log()
        self.instance = first.split(" instance ", 1)[1].strip()

    def log(self) -> str:
        return self.log_path.read_text()

    def session(self, sampling: dict | None = None) -> str:
        resp = httpx.post(
            f"{self.url}/sessions", json={"sampling": sampling} if sampling else {}, headers=auth(ADMIN), timeout=10
        )
        assert resp.status_code == 200, resp.text
        return resp.json()["session_id"]

    def chat(self, key: str, body: dict) -> httpx.Response:
        return httpx.post(f"{self.url}/v1/chat/completions", json=body, headers=auth(key), timeout=30)

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self.engine.should_exit = True


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture(scope="module")
def proxy(tmp_path_factory):
    p = Proxy(tmp_path_factory.mktemp("handoff"))
    yield p
    p.close()


def raw_post(port: int, key: str, total: int, *, chunked: bool) -> tuple[str, float]:
    """POST `total` bytes as a client that keeps sending whatever the server says; returns (status line, s)."""
    sock = socket.create_connection(("127.0.0.1", port))
    head = f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n"
    head += "Transfer-Encoding: chunked\r\n\r\n" if chunked else f"Content-Length: {total}\r\n\r\n"
    chunk = b"x" * MB
    t0 = time.monotonic()

    def send_all() -> None:
        try:
            sock.sendall(head.encode())
            for _ in range(total // MB):
                sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk) if chunked else chunk)
            if chunked:
                sock.sendall(b"0\r\n\r\n")
        except OSError:
            pass  # the server answered and closed: what a refusal looks like to a sender

    sender = threading.Thread(target=send_all, daemon=True)
    sender.start()
    sock.settimeout(60)
    got = b""
    try:
        while b"\r\n" not in got:
            data = sock.recv(4096)
            if not data:
                break
            got += data
    finally:
        sock.close()
    return got.split(b"\r\n")[0].decode(), time.monotonic() - t0


def test_public_health_proves_the_instance_and_nothing_else(proxy):
    doc = httpx.get(f"{proxy.url}/health", timeout=5).json()
    assert doc == {"status": "ok", "instance": proxy.instance}
    full = httpx.get(f"{proxy.url}/health", headers=auth(ADMIN), timeout=5).json()
    assert full["instance"] == proxy.instance and "upstream" in full  # OpenEnv's own, for the operator


@pytest.mark.parametrize(
    "method, path",
    [
        ("GET", "/docs"),
        ("GET", "/openapi.json"),
        ("GET", "/v1/models"),
        ("GET", "/sessions"),
        ("POST", "/sessions"),
        ("POST", "/v1/messages"),
        ("POST", "/v1/responses"),
        ("GET", "/redoc"),
    ],
)
def test_unknown_routes_are_404(proxy, method, path):
    resp = httpx.request(method, f"{proxy.url}{path}", json={}, timeout=5)
    assert (resp.status_code, resp.json()) == (404, {"error": {"message": "not found"}})


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_an_80_mb_unauthenticated_body_is_refused_unread(proxy, chunked):
    before = rss_mb(proxy.proc.pid)
    status, took = raw_post(proxy.port, "not-a-session", 80 * MB, chunked=chunked)
    after = rss_mb(proxy.proc.pid)
    print(
        f"\n80 MB unauthenticated ({'chunked' if chunked else 'content-length'}): {status!r} in {took:.2f}s; "
        f"RSS {before:.1f} -> {after:.1f} MB (+{after - before:.1f})"
    )
    assert status == "HTTP/1.1 401 Unauthorized"
    assert after - before < 20


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_an_80_mb_body_with_a_live_key_is_413_past_the_cap(proxy, chunked):
    key = proxy.session({"temperature": 0.7})
    before = rss_mb(proxy.proc.pid)
    status, took = raw_post(proxy.port, key, 80 * MB, chunked=chunked)
    after = rss_mb(proxy.proc.pid)
    print(
        f"\n80 MB with a session key ({'chunked' if chunked else 'content-length'}): {status!r} in {took:.2f}s; "
        f"RSS {before:.1f} -> {after:.1f} MB (+{after - before:.1f})"
    )
    # The reason phrase is the HTTP library's (h11 in the image says "Content Too Large", RFC 9110).
    assert status.startswith("HTTP/1.1 413 ")
    assert after - before < 20


def test_200_concurrent_unauthenticated_requests_leave_a_rollout_working(proxy):
    key = proxy.session({"temperature": 0.7})
    body = {"model": "m", "messages": [{"role": "user", "content": "x" * 65536}]}

    async def flood() -> tuple[list[int], int, float]:
        limits = httpx.Limits(max_connections=300)
        async with httpx.AsyncClient(base_url=proxy.url, timeout=60, limits=limits) as client:

            async def stranger(i: int) -> int:
                return (await client.post("/v1/chat/completions", json=body, headers=auth(f"guess-{i}"))).status_code

            async def rollout() -> tuple[int, float]:
                await asyncio.sleep(0.05)  # while the flood is in flight
                t0 = time.monotonic()
                resp = await client.post(
                    "/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]}, headers=auth(key)
                )
                return resp.status_code, time.monotonic() - t0

            results = await asyncio.gather(*(stranger(i) for i in range(200)), rollout())
            return list(results[:-1]), *results[-1]

    t0 = time.monotonic()
    strangers, status, took = asyncio.run(flood())
    print(
        f"\n200 concurrent unauthenticated: {strangers.count(401)} x 401 in {time.monotonic() - t0:.2f}s; "
        f"the rollout's call: HTTP {status} in {took:.2f}s"
    )
    assert strangers == [401] * 200
    assert status == 200


def test_a_poisoned_request_leaves_the_rollout_trainable(proxy):
    key = proxy.session({"temperature": 0.7})
    honest = {"model": "m", "messages": [{"role": "user", "content": "list the files"}]}
    assert proxy.chat(key, honest).status_code == 200

    # From code in the sandbox: its own sampling, fields vLLM would honour, and content crafted so the
    # engine's 400 names a parameter (what OpenEnv's compatibility layer learns "fixes" from).
    poisoned = {
        "model": "m",
        "messages": [{"role": "user", "content": f"{POISON_MARKER} please"}],
        "temperature": 0.01,
        "top_p": 0.1,
        "logit_bias": {"11": 100},
        "seed": 7,
        "extra_args": {"x": 1},
        "guided_regex": "ok",
    }
    n_seen = len(proxy.seen)
    refused = proxy.chat(key, poisoned)
    assert refused.status_code == 400, refused.text
    sent = proxy.seen[n_seen]
    assert not {"logit_bias", "seed", "extra_args", "guided_regex"} & set(sent)
    assert sent["top_p"] == 1.0
    assert sent["temperature"] == 0.7  # the run's, not the request's

    for _ in range(2):
        resp = proxy.chat(key, {**honest, "temperature": 2.0})
        assert resp.status_code == 200, resp.text
        assert proxy.seen[-1]["temperature"] == 0.7

    doc = httpx.get(
        f"{proxy.url}/sessions/{key}/rollout", params={"include_messages": "true"}, headers=auth(ADMIN), timeout=10
    ).json()
    fatal = [f for f in doc["validation"] if "[FATAL" in f]
    print(f"\npoisoned request: agent got HTTP 400; later turns {len(doc['turns'])} captured, fatal findings {fatal}")
    assert fatal == []
    result = HarborRolloutResult(
        reward=1.0, rollout_type="train", capture_level="tokens", turns=turns_from_document(doc), findings=fatal
    )
    trace = to_training_trace(result)
    assert len(trace.turns) == 3
    assert all(t.metadata["sampling_params"]["temperature"] == 0.7 for t in trace.turns)
    assert all(sum(t.loss_mask) == 3 for t in trace.turns)


# --- junk bodies, slow senders, the output bound (issue 29 item 3, issue 31 item 4) -------------------------

HEADER_TIMEOUT_S = 2.0
BODY_TIMEOUT_S = 3.0
# How long past a deadline a socket may take to be seen closed: loop scheduling on a loaded 2-core machine.
MARGIN_S = 10.0


def deep(levels: int) -> bytes:
    return b'{"messages": ' + b"[" * levels + b"]" * levels + b"}"


@pytest.mark.parametrize(
    "body, why",
    [
        (deep(100_000), "JSON nested deeper than this interpreter parses (the limit is 64 levels)"),
        (b'{"model": "m", "messages": ' + b'{"a": ' * 100_000 + b"1" + b"}" * 100_001, None),
        (deep(70), "JSON nested deeper than 64 levels"),
        (b'{"messages": [}', "body is not JSON (JSONDecodeError at byte 14)"),
        (b'{"messages": "\xff\xfe"}', "body is not JSON (UnicodeDecodeError at byte 14)"),
        (b"[1, 2]", "body must be a JSON object"),
    ],
    ids=["100k-brackets", "100k-objects", "70-levels", "broken", "not-utf8", "array"],
)
def test_a_junk_body_is_400_with_at_most_one_log_line_and_no_traceback(proxy, body, why):
    key = proxy.session({"temperature": 0.7})
    before = proxy.log()
    resp = httpx.post(
        f"{proxy.url}/v1/chat/completions",
        content=body,
        headers={**auth(key), "content-type": "application/json"},
        timeout=30,
    )
    assert resp.status_code == 400, resp.text
    if why is not None:
        assert resp.json() == {"error": {"message": why}}
    else:  # the C parser's limit depends on the interpreter build; either refusal names the nesting
        assert "nested deeper" in resp.json()["error"]["message"], resp.text
    time.sleep(0.2)  # the log line is written before the reply; this is only for the file's buffer
    new = proxy.log()[len(before) :]
    assert "Traceback" not in new and "RecursionError" not in new, new
    # One line for the first such body of the module run, none for the rest (a minute apart at most).
    lines = [line for line in new.splitlines() if "capture port:" in line]
    assert len(lines) <= 1, new
    assert all(line.endswith("; answered 400") for line in lines), lines
    # The proxy is still fine.
    assert proxy.chat(key, {"model": "m", "messages": [{"role": "user", "content": "hi"}]}).status_code == 200


def test_the_first_junk_body_was_logged_once(proxy):
    lines = [line for line in proxy.log().splitlines() if "capture port:" in line]
    assert len(lines) == 1, lines
    assert lines[0].startswith("WARNING env_server.front: capture port: ") and "answered 400" in lines[0]


@pytest.mark.parametrize(
    "asked",
    [
        {},
        {"max_tokens": 10**9},
        {"max_tokens": 1e9},
        {"max_tokens": "100000"},
        {"max_tokens": None},
        {"max_completion_tokens": 10**6},
        {"max_tokens": 10**9, "max_completion_tokens": 10**9},
        {"max_tokens": 100},
    ],
    ids=["absent", "huge", "float", "string", "null", "completion-huge", "both", "within"],
)
def test_a_turn_never_asks_the_engine_for_more_than_the_run_bound(proxy, asked):
    """The run's per-turn bound (MAX_OUTPUT_TOKENS = the trainer's MAX_COMPLETION_TOKENS; 256 here) is what
    the engine sees, whatever the agent asked."""
    key = proxy.session({"temperature": 0.7})
    n = len(proxy.seen)
    resp = proxy.chat(key, {"model": "m", "messages": [{"role": "user", "content": "hi"}], **asked})
    assert resp.status_code == 200, resp.text
    sent = proxy.seen[n]
    lengths = {k: sent[k] for k in ("max_tokens", "max_completion_tokens") if k in sent}
    expected = 100 if asked == {"max_tokens": 100} else 256
    assert lengths and set(lengths.values()) == {expected}, sent


@pytest.fixture(scope="module")
def tight(tmp_path_factory):
    """A proxy whose guards fire in seconds: headers within 2 s, a body within 3 s, at most 32 connections."""
    p = Proxy(
        tmp_path_factory.mktemp("tight"),
        {"header_timeout_s": HEADER_TIMEOUT_S, "body_timeout_s": BODY_TIMEOUT_S, "max_connections": 32},
    )
    yield p
    p.close()


class SlowSenders:
    """`n` connections that send a request's headers one byte a second, never finishing them."""

    HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer slow\r\nContent-Length: 2\r\n"

    def __init__(self, port: int, n: int) -> None:
        self.socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(n)]
        self.closed_at: dict[int, float] = {}
        self.replies: dict[int, bytes] = {}
        self.t0 = time.monotonic()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._drip, daemon=True)
        self.thread.start()

    def _drip(self) -> None:
        for i in range(len(self.HEAD)):
            for n, sock in enumerate(self.socks):
                if n in self.closed_at:
                    continue
                try:
                    sock.sendall(self.HEAD[i : i + 1])
                except OSError:
                    pass  # closed by the server: seen by `wait_closed`
            if self.stop.wait(1.0):
                return

    def wait_closed(self, within_s: float) -> None:
        """Read every socket until the server closes it or `within_s` from the first connect passes."""
        deadline = self.t0 + within_s
        for n, sock in enumerate(self.socks):
            got = b""
            while n not in self.closed_at:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                sock.settimeout(left)
                try:
                    data = sock.recv(4096)
                except TimeoutError:
                    break
                except OSError:
                    data = b""
                if not data:
                    self.closed_at[n] = time.monotonic() - self.t0
                got += data
            self.replies[n] = got
        self.stop.set()
        for sock in self.socks:
            sock.close()


def test_slow_header_senders_are_closed_while_health_and_a_rollout_are_served(tight):
    key = tight.session({"temperature": 0.7})
    slow = SlowSenders(tight.port, 100)
    # Past conn_guard.SHED_AFTER_S, so the slow ones are the ones shed when a caller needs room.
    time.sleep(1.5)
    served = []
    for _ in range(5):
        health = httpx.get(f"{tight.url}/health", timeout=10)
        chat = tight.chat(key, {"model": "m", "messages": [{"role": "user", "content": "hi"}]})
        served.append((health.status_code, health.json().get("instance"), chat.status_code))
    slow.wait_closed(HEADER_TIMEOUT_S + MARGIN_S)
    statuses = sorted({r.split(b"\r\n")[0].decode() for r in slow.replies.values()})
    print(
        f"\n100 slow header senders: {len(slow.closed_at)} closed, the last after "
        f"{max(slow.closed_at.values(), default=0):.1f}s (header deadline {HEADER_TIMEOUT_S:.0f}s, "
        f"32 connections at most); replies {statuses}; meanwhile /health and a rollout's call: {served[0]} x5"
    )
    assert served == [(200, tight.instance, 200)] * 5
    assert len(slow.closed_at) == 100, f"{100 - len(slow.closed_at)} slow senders still open"
    assert set(statuses) <= {"HTTP/1.1 408 Request Timeout", "HTTP/1.1 503 Service Unavailable"}, statuses


def test_a_body_that_does_not_arrive_in_time_is_408_and_the_socket_closed(tight):
    key = tight.session({"temperature": 0.7})
    sock = socket.create_connection(("127.0.0.1", tight.port))
    sock.sendall(
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n"
        'Content-Length: 1000\r\n\r\n{"messages": '.encode()
    )
    t0 = time.monotonic()
    # The deadline holds a model-call slot; /health is served meanwhile.
    assert httpx.get(f"{tight.url}/health", timeout=10).status_code == 200
    sock.settimeout(BODY_TIMEOUT_S + MARGIN_S)
    got = b""
    while True:
        data = sock.recv(4096)
        if not data:
            break
        got += data
    took = time.monotonic() - t0
    sock.close()
    status = got.split(b"\r\n")[0].decode()
    print(f"\na body stalled after 13 of 1000 bytes: {status!r}, closed after {took:.1f}s")
    assert got.startswith(b"HTTP/1.1 408 "), got
    assert b"request body did not arrive within 3 s" in got
    assert took < BODY_TIMEOUT_S + MARGIN_S
