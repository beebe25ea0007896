"""A stdlib stand-in for an engine's probe surface (vLLM's wire format), where the real mock engine cannot
say what a test needs: here, a model whose runner-up token stays masked whatever the request asks, so
processed logprobs cannot be proven. Used by the probe's own tests and by scripts/status's."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODEL = "Qwen/Qwen3-1.7B"


class Engine:
    """gap(T) -> the top two logprobs at the first position; None masks the runner-up (-9999)."""

    def __init__(self, gap):
        self.gap = gap
        self.bodies: list[dict] = []
        engine = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, doc):
                raw = json.dumps(doc).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_GET(self):
                self._send({"data": [{"id": MODEL}]})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                engine.bodies.append(body)
                self._send(engine.answer(body))

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer(self, body):
        if body.get("return_token_ids"):
            entry = {"token": "token_id:7", "logprob": -0.1, "top_logprobs": []}
            return {"prompt_token_ids": [1, 2, 3], "choices": [{"token_ids": [7], "logprobs": {"content": [entry]}}]}
        gap = self.gap(body["temperature"])
        second = -9999.0 if gap is None else -0.01 - gap
        top = [{"token": "token_id:1", "logprob": -0.01}, {"token": "token_id:2", "logprob": second}]
        return {
            "choices": [{"logprobs": {"content": [{"token": "token_id:1", "logprob": -0.01, "top_logprobs": top}]}}]
        }

    def close(self) -> None:
        self.server.shutdown()
