"""How new weights reach the engine after each optimizer step (WEIGHT_TRANSFER).

- `nccl` (GPU): TRL's own `WeightTransferClient`, built by the trainer against ENGINE_URL (vLLM's NCCL
  weight-transfer engine; the engine runs with VLLM_SERVER_DEV_MODE=1).
- `mock` (CPU form): the mock engine's backend, `mock_engine.weight_client`, which exposes the same five
  methods AsyncGRPO calls (`init_weight_transfer/pause/send_weights/resume/destroy`). Same trainer code
  otherwise.
"""

from __future__ import annotations

METHODS = ("init_weight_transfer", "pause", "send_weights", "resume", "destroy")


def build(mode: str, engine_url: str):
    if mode == "nccl":
        return None  # AsyncGRPOTrainer builds its NCCL client itself
    if mode != "mock":
        raise ValueError(f"WEIGHT_TRANSFER={mode!r} is unknown: use nccl (vLLM on GPU) or mock (the CPU form)")
    from mock_engine import weight_client

    candidates = [
        obj for obj in vars(weight_client).values()
        if isinstance(obj, type) and obj.__module__ == weight_client.__name__ and all(hasattr(obj, m) for m in METHODS)
    ]
    if len(candidates) != 1:
        raise RuntimeError(
            f"mock_engine.weight_client should define exactly one class with {', '.join(METHODS)}; found "
            f"{[c.__name__ for c in candidates]}"
        )
    return candidates[0](engine_url)
