"""The mock engine's Prometheus `/metrics`: the vLLM names an operator (and `scripts/status`) reads,
filled from the mock's own counters, so the CPU form shows the same engine figures production does.

Names and labels as vLLM 0.31.0's Prometheus logger writes them (`vllm/v1/metrics/loggers.py`, labels
`model_name` and `engine`): `vllm:num_requests_running`, `vllm:num_requests_waiting`,
`vllm:kv_cache_usage_perc` (a fraction, 0..1), and the counters `vllm:prompt_tokens_total`,
`vllm:generation_tokens_total`, `vllm:request_success_total`.

What the numbers mean here: the mock admits at most `max_num_seqs` generations at once (vLLM's
`--max-num-seqs`); a request beyond that waits, and is counted waiting, until a slot frees. KV-cache
use is the tokens held by running requests (prompt plus what they generated so far) over a notional
pool of `max_num_seqs` full-length sequences.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass
class _Held:
    tokens: int


class EngineMetrics:
    def __init__(self, model_name: str, max_num_seqs: int, max_model_len: int):
        self.model_name = model_name
        self.max_num_seqs = max_num_seqs
        self.kv_capacity_tokens = max_num_seqs * max_model_len
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(max_num_seqs)
        self.running = 0
        self.waiting = 0
        self.kv_tokens = 0
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.request_success_total = 0

    @contextmanager
    def request(self, prompt_tokens: int):
        """Hold one scheduler slot for a generation request: waiting until admitted, then running."""
        with self._lock:
            self.waiting += 1
        self._slots.acquire()
        held = _Held(prompt_tokens)
        with self._lock:
            self.waiting -= 1
            self.running += 1
            self.kv_tokens += prompt_tokens
            self.prompt_tokens_total += prompt_tokens
        ok = False
        try:
            yield held
            ok = True
        finally:
            with self._lock:
                self.running -= 1
                self.kv_tokens -= held.tokens
                self.request_success_total += int(ok)
            self._slots.release()

    def generated(self, held: _Held, tokens: int) -> None:
        with self._lock:
            held.tokens += tokens
            self.kv_tokens += tokens
            self.generation_tokens_total += tokens

    def render(self) -> str:
        labels = f'{{engine="0",model_name="{_escape(self.model_name)}"}}'
        with self._lock:
            gauges = [
                ("vllm:num_requests_running", "Number of requests in model execution batches.", self.running),
                ("vllm:num_requests_waiting", "Number of requests waiting to be processed.", self.waiting),
                (
                    "vllm:kv_cache_usage_perc",
                    "KV-cache usage. 1 means 100 percent usage.",
                    self.kv_tokens / self.kv_capacity_tokens if self.kv_capacity_tokens else 0.0,
                ),
            ]
            counters = [
                ("vllm:prompt_tokens", "Number of prefill tokens processed.", self.prompt_tokens_total),
                ("vllm:generation_tokens", "Number of generation tokens processed.", self.generation_tokens_total),
                ("vllm:request_success", "Count of successfully processed requests.", self.request_success_total),
            ]
        lines = []
        for name, doc, value in gauges:
            lines += [f"# HELP {name} {doc}", f"# TYPE {name} gauge", f"{name}{labels} {float(value)}"]
        for name, doc, value in counters:
            lines += [
                f"# HELP {name}_total {doc}",
                f"# TYPE {name}_total counter",
                f"{name}_total{labels} {float(value)}",
            ]
        return "\n".join(lines) + "\n"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
