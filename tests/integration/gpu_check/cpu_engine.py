"""The probe's side of vLLM's OpenAI surface, on the CPU: transformers' forward of a model folder.

For the GPU check's model (1.41B parameters) on a CPU, where vLLM cannot run. One forward per distinct prompt
(cached: the probe asks the same prompt at two temperatures), logprobs as vLLM reports them with
`--logprobs-mode processed_logprobs` and `--return-tokens-as-token-ids`: log_softmax(logits / temperature) at the
first position, tokens written `token_id:N`. Sampling that would truncate the distribution (top_k, top_p,
min_p from the request or, as vLLM applies it, the model's generation_config.json) is refused rather than
approximated: the probe pins it off, and this model's generation config sets none.

The probe's first request (greedy, 8 tokens, `return_token_ids`) grades the engine's launch flags (prompt ids,
sampled ids, one aligned logprob entry per id), which no model changes; it is answered in vLLM's shape from the
real prompt ids and the real first-position logits, as a one-token completion (decoding 8 tokens of this model
on two CPU cores would cost minutes and prove nothing more about the model).
"""

from __future__ import annotations

import json
import math
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import torch

# vLLM's sentinel for a masked token's logprob.
NEG_INF_LOGPROB = -9999.0
UNTRUNCATED = {"top_k": (0, -1), "top_p": (1.0,), "min_p": (0.0,)}


class CpuEngine:
    def __init__(self, model_dir: Path, served: str):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.served = served
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        config = json.loads((Path(model_dir) / "generation_config.json").read_text())
        self.generation_defaults = {k: config[k] for k in UNTRUNCATED if config.get(k) is not None}
        self.bodies: list[dict] = []
        self.logits_by_prompt: dict[tuple[int, ...], torch.Tensor] = {}
        engine = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, status: int, doc: dict) -> None:
                raw = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_GET(self):
                if self.path.rstrip("/") == "/v1/models":
                    self._send(200, {"object": "list", "data": [{"id": engine.served, "object": "model"}]})
                else:
                    self._send(404, {"error": f"no route {self.path}"})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                engine.bodies.append(body)
                if self.path.rstrip("/") != "/v1/chat/completions":
                    self._send(404, {"error": f"no route {self.path}"})
                    return
                try:
                    self._send(200, engine.answer(body))
                except ValueError as exc:
                    self._send(400, {"error": str(exc)})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def prompt_ids(self, messages: list[dict]) -> list[int]:
        text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return self.tokenizer.encode(text, add_special_tokens=False)

    def last_logits(self, ids: list[int]) -> torch.Tensor:
        key = tuple(ids)
        if key not in self.logits_by_prompt:
            with torch.inference_mode():
                self.logits_by_prompt[key] = self.model(torch.tensor([ids])).logits[0, -1].float()
        return self.logits_by_prompt[key]

    def processed_logprobs(self, logits: torch.Tensor, body: dict) -> torch.Tensor:
        for field, off in UNTRUNCATED.items():
            value = body.get(field, self.generation_defaults.get(field, off[0]))
            if value not in off:
                raise ValueError(
                    f"{field}={value!r} would truncate the distribution: this stand-in computes only "
                    "untruncated processed logprobs"
                )
        temperature = float(body.get("temperature", 1.0))
        scaled = logits if temperature < 1e-5 else logits / temperature  # greedy: vLLM reports the raw softmax
        return torch.log_softmax(scaled, -1)

    def answer(self, body: dict) -> dict:
        if body.get("model") != self.served:
            raise ValueError(f"model {body.get('model')!r} is not served here ({self.served!r})")
        ids = self.prompt_ids(body["messages"])
        logp = self.processed_logprobs(self.last_logits(ids), body)
        token = int(torch.argmax(logp))
        k = int(body.get("top_logprobs") or 0)
        values, top_ids = torch.topk(logp, k) if k else (torch.empty(0), torch.empty(0, dtype=torch.long))
        entry = {
            "token": f"token_id:{token}",
            "logprob": _finite(logp[token].item()),
            "top_logprobs": [
                {"token": f"token_id:{i}", "logprob": _finite(v)} for v, i in zip(values.tolist(), top_ids.tolist())
            ],
        }
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": self.tokenizer.decode([token])},
            "logprobs": {"content": [entry]},
            "finish_reason": "length",
        }
        reply = {"object": "chat.completion", "model": self.served, "choices": [choice]}
        if body.get("return_token_ids"):
            reply["prompt_token_ids"] = ids
            choice["token_ids"] = [token]
        return reply


def _finite(value: float) -> float:
    return value if math.isfinite(value) else NEG_INF_LOGPROB
