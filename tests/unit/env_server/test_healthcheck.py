"""env-server's healthcheck (`python -m env_server.healthcheck`) against real local HTTP servers standing in for the
capture proxy's /health and the Task API's /harbor_env/splits, and what the command costs to start."""

import json
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from env_server.healthcheck import check

ROOT = Path(__file__).resolve().parents[3]


def serve(routes: dict[str, tuple[int, object]]):
    """A loopback server answering each path with (status, body as JSON, or raw text when a str)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            status, body = routes.get(self.path, (404, {"detail": "Not Found"}))
            data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture
def ports(monkeypatch):
    servers = []

    def start(health: tuple[int, object], splits: tuple[int, object]) -> tuple[int, int]:
        capture = serve({"/health": health})
        task_api = serve({"/harbor_env/splits": splits})
        servers.extend([capture, task_api])
        cp, tp = capture.server_address[1], task_api.server_address[1]
        for name, value in {"CAPTURE_PORT": cp, "ENV_SERVER_PORT": tp}.items():
            monkeypatch.setenv(name, str(value))
        for name in ("CAPTURE_HOST", "ENV_SERVER_HOST"):
            monkeypatch.setenv(name, "127.0.0.1")
        # A proxy in the environment must not reroute a check of the container's own loopback ports.
        monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")
        monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
        return cp, tp

    yield start
    for server in servers:
        server.shutdown()


def test_healthy_when_the_proxy_has_an_instance_and_the_task_api_lists_splits(ports):
    ports((200, {"instance": "abc123"}), (200, ["train", "heldout"]))
    assert check() == (True, "ok: capture instance abc123, 2 split(s)")


def test_a_proxy_without_an_instance_id_is_not_healthy(ports):
    cp, _ = ports((200, {"status": "ok"}), (200, ["train"]))
    assert check() == (
        False,
        f"capture proxy http://127.0.0.1:{cp}/health: answered without an instance id: {{'status': 'ok'}}",
    )


def test_a_task_api_error_status_is_not_healthy_and_names_it(ports):
    _, tp = ports((200, {"instance": "abc123"}), (503, {"detail": "dataset not resolved"}))
    assert check() == (
        False,
        f"task api http://127.0.0.1:{tp}/harbor_env/splits: HTTP 503, no splits: {{'detail': 'dataset not resolved'}}",
    )


def test_a_body_that_is_not_json_is_not_healthy(ports):
    cp, _ = ports((200, "<html>502 Bad Gateway</html>"), (200, ["train"]))
    healthy, line = check()
    assert not healthy and line.startswith(f"capture proxy http://127.0.0.1:{cp}/health: JSONDecodeError: "), line


def test_a_refused_port_is_not_healthy(monkeypatch):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    monkeypatch.setenv("CAPTURE_PORT", str(free))
    monkeypatch.setenv("ENV_SERVER_PORT", str(free))
    monkeypatch.setenv("CAPTURE_HOST", "127.0.0.1")
    healthy, line = check(timeout=2)
    assert not healthy and line.startswith(f"capture proxy http://127.0.0.1:{free}/health: URLError: "), line


def test_the_command_does_not_import_httpx():
    """Docker starts it as a new process every 2 s in the CPU form: `import httpx` was 0.4 of the 0.55 CPU-s a check
    cost in a fresh env-server container (its CLI module imports click and rich)."""
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, env_server.healthcheck; print(sorted(m for m in sys.modules if m.split('.')[0] in ('httpx', 'rich', 'click')))",
        ],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(ROOT / "services"), "PATH": "/usr/bin:/bin"},
        check=True,
    )
    assert out.stdout.strip() == "[]", out.stdout
