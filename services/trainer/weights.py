"""How new weights reach the engine after each optimizer step (WEIGHT_TRANSFER).

- `nccl` (GPU): TRL's own `WeightTransferClient`, built by the trainer against ENGINE_URL (vLLM's NCCL
  weight-transfer engine; the engine runs with VLLM_SERVER_DEV_MODE=1).
- `mock` (CPU form): the mock engine's backend, `mock_engine.weight_client`, which exposes the same five
  methods AsyncGRPO calls (`init_weight_transfer/pause/send_weights/resume/destroy`). Same trainer code
  otherwise.
"""

from __future__ import annotations


def build(mode: str, engine_url: str):
    if mode == "nccl":
        return None  # AsyncGRPOTrainer builds its NCCL client itself
    if mode != "mock":
        raise ValueError(f"WEIGHT_TRANSFER={mode!r} is unknown: use nccl (vLLM on GPU) or mock (the CPU form)")
    from mock_engine.weight_client import MockWeightTransfer

    return MockWeightTransfer(engine_url)
