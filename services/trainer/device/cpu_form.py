"""The two places TRL 1.16.0's AsyncGRPO assumes CUDA, answered for the CPU form.

1. Tree-packing attention. AsyncGRPO packs samples as a token tree and attends with FlashAttention-3's varlen kernel,
fetched from the Hub by `kernels` and CUDA-only. The CPU form has neither a GPU nor the Hub, so this
installs the same function (same arguments, same masking rule) computed with torch's SDPA, one query
segment at a time (`varlen_sdpa.py`).
2. MFU. The trainer asks `torch.cuda.get_device_name` for the peak FLOPs of its device, which raises
without a driver; on CPU the answer is "unknown" (None), which TRL already handles by skipping MFU.

Installed only when no CUDA device exists; a GPU run never reaches any of it.
"""

from __future__ import annotations

import types

import torch

from .varlen_sdpa import flash_attn_varlen_func


def install() -> bool:
    """Answer TRL's CUDA-only calls on a machine with no CUDA device. Returns whether it did."""
    if torch.cuda.is_available():
        return False
    from trl.experimental.async_grpo import async_grpo_trainer, packing

    packing._flash_attn = lambda: types.SimpleNamespace(flash_attn_varlen_func=flash_attn_varlen_func)
    async_grpo_trainer.get_peak_flops_per_device = lambda accelerator, dtype: None
    return True
