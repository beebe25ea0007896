"""Trainer-side weight transfer into the mock engine: AsyncGRPOTrainer(weight_transfer=...).

The CPU form has no NCCL peer, so the trainer's parameters travel as safetensors blobs over the mock's
dev routes, in TRL's order: pause -> start_weight_update -> update_weights (chunks) ->
finish_weight_update -> resume. The mock stages every tensor and swaps them in together at
finish_weight_update, so a failed transfer changes nothing.

`iterator` is what AsyncGRPOTrainer._streaming_iter yields: `(name, tensor)` pairs under the base
checkpoint's parameter names (TRL's `_iter_vllm_named_params`), already gathered to full tensors.
Names, dtypes and shapes are checked against the mock's own manifest before any bytes move, so a
trainer that loaded a different model (or another dtype) fails with one line that says which parameter.
"""

from __future__ import annotations

import logging
import time

import requests

log = logging.getLogger(__name__)


class MockWeightTransfer:
    """The five methods AsyncGRPO's WeightTransferProtocol asks for, over HTTP to mock_engine."""

    def __init__(
        self, engine_url: str, chunk_bytes: int = 32 << 20, timeout_s: float = 300.0, ready_timeout_s: float = 240.0
    ):
        self.base = engine_url.rstrip("/")  # the engine's root (ENGINE_URL); the weight routes live there
        self.chunk_bytes = chunk_bytes
        self.timeout_s = timeout_s
        self.ready_timeout_s = ready_timeout_s
        self.manifest: dict[str, tuple[str, list[int]]] | None = None
        self.last_result: dict = {}

    def _post(self, path: str, **kwargs) -> dict:
        resp = requests.post(f"{self.base}{path}", timeout=self.timeout_s, **kwargs)
        if resp.status_code != 200:
            try:
                detail = resp.json()["error"]["message"]
            except (ValueError, KeyError, TypeError):
                detail = resp.text[:300]
            raise RuntimeError(f"mock engine {path} answered HTTP {resp.status_code}: {detail}")
        return resp.json()

    def init_weight_transfer(self) -> None:
        deadline = time.monotonic() + self.ready_timeout_s
        while True:
            try:
                if requests.get(f"{self.base}/health", timeout=5).status_code == 200:
                    break
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"mock engine at {self.base} did not answer /health within {self.ready_timeout_s:.0f}s"
                )
            time.sleep(1.0)
        resp = requests.get(f"{self.base}/mock/weight_manifest", timeout=self.timeout_s)
        if resp.status_code == 404:
            raise RuntimeError(
                f"{self.base} has no /mock/weight_manifest: WEIGHT_TRANSFER=mock needs the mock engine; "
                "against vLLM use WEIGHT_TRANSFER=nccl"
            )
        resp.raise_for_status()
        doc = resp.json()
        self.manifest = {n: (d, list(s)) for n, d, s in zip(doc["names"], doc["dtype_names"], doc["shapes"])}
        self._post("/init_weight_transfer_engine", json={"init_info": {"transport": "http-safetensors"}})

    def pause(self) -> None:
        self._post("/pause", params={"mode": "keep"})

    def resume(self) -> None:
        self._post("/resume")

    def destroy(self) -> None:
        self.manifest = None

    def check(self, name: str, tensor) -> None:
        """Raise when `tensor` is not what the served model holds under `name`."""
        if self.manifest is None:
            raise RuntimeError("send_weights before init_weight_transfer")
        dtype, shape = str(tensor.dtype).removeprefix("torch."), list(tensor.shape)
        if name not in self.manifest:
            raise RuntimeError(
                f"parameter {name!r} does not exist in the mock engine's model: the trainer loaded "
                "a different model than MOCK_MODEL_DIR"
            )
        want_dtype, want_shape = self.manifest[name]
        if (dtype, shape) != (want_dtype, want_shape):
            raise RuntimeError(
                f"parameter {name!r} is {dtype}{shape} in the trainer but {want_dtype}{want_shape} in "
                f"the mock engine: load the trainer's model in {want_dtype}"
            )

    def send_weights(self, iterator) -> None:
        from safetensors.torch import save

        t0 = time.monotonic()
        self._post("/start_weight_update", json={"is_checkpoint_format": True})
        chunk: dict = {}
        size = sent = 0

        def flush() -> None:
            nonlocal chunk, size
            if chunk:
                self._post("/update_weights", data=save(chunk), headers={"Content-Type": "application/octet-stream"})
            chunk, size = {}, 0

        for name, tensor in iterator:
            self.check(name, tensor)
            cpu = tensor.detach().to("cpu").contiguous()
            chunk[name] = cpu
            size += cpu.numel() * cpu.element_size()
            sent += 1
            if size >= self.chunk_bytes:
                flush()
        flush()
        self.last_result = self._post("/finish_weight_update")
        if self.last_result.get("untouched"):
            log.warning(
                "weight sync left %d mock-engine parameters untouched (frozen in the trainer?)",
                self.last_result["untouched"],
            )
        log.debug("mock weight sync: %d tensors in %.2fs", sent, time.monotonic() - t0)
