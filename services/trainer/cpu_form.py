"""The two places TRL 1.16.0's AsyncGRPO assumes CUDA, answered for the CPU form.

1. Tree-packing attention. AsyncGRPO packs samples as a token tree and attends with FlashAttention-3's varlen kernel,
fetched from the Hub by `kernels` and CUDA-only. The CPU form has neither a GPU nor the Hub, so this
installs the same function (same arguments, same masking rule) computed with torch's SDPA, one query
segment at a time.
2. MFU. The trainer asks `torch.cuda.get_device_name` for the peak FLOPs of its device, which raises
without a driver; on CPU the answer is "unknown" (None), which TRL already handles by skipping MFU.

Installed only when no CUDA device exists; a GPU run never reaches any of it.
"""

from __future__ import annotations

import types

import torch
import torch.nn.functional as F


def flash_attn_varlen_func(
    q,
    k,
    v,
    cu_seqlens_q,
    cu_seqlens_k,
    max_seqlen_q,
    max_seqlen_k,
    softmax_scale=None,
    causal=True,
    window_size=(-1, -1),
    softcap=None,
    **_,
):
    """q: (total_q, H, D); k, v: (total_k, Hkv, D). Causal masks align to the bottom-right corner, as
    FlashAttention does when a query segment is the tail of its key segment."""
    if window_size not in ((-1, -1), None) or softcap:
        raise NotImplementedError("the CPU tree attention supports neither sliding windows nor softcap")
    out = torch.empty_like(q)
    heads, kv_heads = q.shape[1], k.shape[1]
    for i in range(len(cu_seqlens_q) - 1):
        qs, qe = int(cu_seqlens_q[i]), int(cu_seqlens_q[i + 1])
        ks, ke = int(cu_seqlens_k[i]), int(cu_seqlens_k[i + 1])
        if qe == qs:
            continue
        qi = q[qs:qe].transpose(0, 1)  # (H, Lq, D)
        ki = k[ks:ke].transpose(0, 1).repeat_interleave(heads // kv_heads, dim=0)
        vi = v[ks:ke].transpose(0, 1).repeat_interleave(heads // kv_heads, dim=0)
        lq, lk = qe - qs, ke - ks
        mask = None
        if causal:
            rows = torch.arange(lq).unsqueeze(1)
            cols = torch.arange(lk).unsqueeze(0)
            mask = cols <= rows + (lk - lq)
        out[qs:qe] = F.scaled_dot_product_attention(qi, ki, vi, attn_mask=mask, scale=softmax_scale).transpose(0, 1)
    return out


def install() -> bool:
    """Answer TRL's CUDA-only calls on a machine with no CUDA device. Returns whether it did."""
    if torch.cuda.is_available():
        return False
    from trl.experimental.async_grpo import async_grpo_trainer, packing

    packing._flash_attn = lambda: types.SimpleNamespace(flash_attn_varlen_func=flash_attn_varlen_func)
    async_grpo_trainer.get_peak_flops_per_device = lambda accelerator, dtype: None
    return True
