"""The stand-in forwards like a tunnel (request bodies in, streamed responses out, chunk by chunk),
and the other ways tunnel-check finds a URL (cloudflared's logfile alone, `direct`) verify the same
way against the real capture proxy."""

from __future__ import annotations

import threading

import httpx
import pytest
from support import wait_until

from stack import handoff


class StreamingUpstream:
    """A plain ASGI server that streams its answer in two parts and holds the second until the test
    says so: if the stand-in buffered the response, the first part could never arrive first."""

    def __init__(self, port):
        self.port = port
        import uvicorn

        self.release = threading.Event()
        self.server = uvicorn.Server(
            uvicorn.Config(self.app, interface="asgi3", host="127.0.0.1", port=port, log_level="warning")
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    async def app(self, scope, receive, send):
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        await send({"type": "http.response.body", "body": b"data: first " + body + b"\n\n", "more_body": True})
        import asyncio

        while not self.release.is_set():
            await asyncio.sleep(0.02)
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False})


@pytest.fixture(scope="module")
def upstream(kit):
    up = StreamingUpstream(kit.free_ports(1)[0])
    up.thread.start()
    wait_until(lambda: up.server.started, kit.START_DEADLINE_S, "streaming upstream")
    yield up
    up.server.should_exit = True
    up.thread.join(timeout=10)


def test_streaming_response_passes_through_chunk_by_chunk(kit, upstream, tmp_path):
    standin = kit.Standin(tmp_path, *kit.free_ports(2), capture_port=upstream.port)
    try:
        with httpx.stream("POST", f"{standin.url}/v1/chat/completions", content=b'{"stream":true}', timeout=60) as resp:
            assert resp.status_code == 200
            assert resp.headers["content-type"] == "text/event-stream"
            chunks = resp.iter_raw()
            first = next(chunks)
            # The upstream is still holding its second part: this arrived unbuffered.
            assert first == b'data: first {"stream":true}\n\n'
            upstream.release.set()
            assert b"".join(chunks) == b"data: [DONE]\n\n"
    finally:
        upstream.release.set()
        standin.stop()


def test_standin_refuses_to_listen_everywhere(kit, tmp_path):
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-m", "tunnel_standin"],
        env={
            "PYTHONPATH": str(kit.SERVICES),
            "STANDIN_LISTEN_HOST": "0.0.0.0",
            "TUNNEL_METRICS_PORT": str(kit.free_ports(1)[0]),
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2 and "every interface" in result.stderr


def run_check(kit, tmp_path, env):
    log = tmp_path / "tunnel-check.out"
    proc = kit.spawn(
        "tunnel_check",
        {
            "CAPTURE_PORT": str(kit.PROXY_A),
            "HANDOFF_DIR": str(tmp_path / "handoff"),
            "TUNNEL_CHECK_INTERVAL_S": "2",
            "TUNNEL_CHECK_TIMEOUT_S": "1.5",
            **env,
        },
        log,
    )
    return proc, log


def test_logfile_alone_finds_the_quick_tunnel_url(kit, proxies, tmp_path):
    standin = kit.Standin(tmp_path, *kit.free_ports(2))
    # Metrics unset: the URL can only come from the cloudflared-format banner in the logfile.
    proc, log = run_check(kit, tmp_path, {"TUNNEL_PROVIDER": "cloudflared", "TUNNEL_LOG": str(standin.tunnel_log)})
    try:
        doc = wait_until(lambda: handoff.lookup(tmp_path / "handoff")[0], kit.START_DEADLINE_S, "published", log=log)
        assert doc.url == standin.url and doc.instance == proxies[0].instance
    finally:
        proc.terminate()
        proc.wait(timeout=15)
        standin.stop()


def test_direct_provider_verifies_the_same_way(kit, proxies, tmp_path):
    proc, log = run_check(kit, tmp_path, {"TUNNEL_PROVIDER": "direct", "DIRECT_URL": f"http://127.0.0.1:{kit.PROXY_A}"})
    try:
        doc = wait_until(lambda: handoff.lookup(tmp_path / "handoff")[0], kit.START_DEADLINE_S, "published", log=log)
        assert doc.provider == "direct" and doc.instance == proxies[0].instance
    finally:
        proc.terminate()
        proc.wait(timeout=15)


def test_direct_url_pointing_at_another_proxy_is_never_published(kit, proxies, tmp_path):
    proc, log = run_check(kit, tmp_path, {"TUNNEL_PROVIDER": "direct", "DIRECT_URL": f"http://127.0.0.1:{kit.PROXY_B}"})
    try:
        wait_until(
            lambda: "JSON from another proxy instance" in log.read_text(),
            kit.START_DEADLINE_S,
            "rejection logged",
            log=log,
        )
        assert handoff.lookup(tmp_path / "handoff")[0] is None
    finally:
        proc.terminate()
        proc.wait(timeout=15)
