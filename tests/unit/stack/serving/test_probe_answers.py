"""The engine probe's refusals for an engine that is down, answers something that is not JSON, or has no model
loaded: each one line naming the URL (a local HTTP server stands in for a broken engine)."""

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from stack.serving.probe import Unhealthy, probe


def serve(body: bytes):
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"<html>502 Bad Gateway</html>", "did not answer JSON"),
        (b'{"object": "list", "data": []}', "lists no model: the engine has not loaded one"),
        (b"{}", "lists no model: the engine has not loaded one"),
    ],
)
def test_a_broken_answer_is_named(body, why):
    server, root = serve(body)
    try:
        with pytest.raises(Unhealthy) as err:
            probe(root, timeout=5)
        assert str(err.value) == f"{root}/v1/models {why}"
    finally:
        server.shutdown()
        server.server_close()


def test_an_engine_that_is_down_is_not_reachable():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        root = f"http://127.0.0.1:{s.getsockname()[1]}"  # bound, never listening: connection refused
        with pytest.raises(Unhealthy) as err:
            probe(root, timeout=5)
    assert str(err.value) == (
        f"{root}/v1/models is not reachable ([Errno 111] Connection refused); the engine is still starting or died"
    )
