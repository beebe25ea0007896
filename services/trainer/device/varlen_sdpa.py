"""FlashAttention's varlen call (`flash_attn_varlen_func`), computed with torch's SDPA one segment at a time.

TRL 1.16.0's tree attention (`trl.experimental.async_grpo.packing.tree_attention`) calls FlashAttention-3's
varlen kernel, fetched from the Hub and CUDA-only. Two users need the same call without it: the CPU form
of this trainer (`cpu_form.py`) and the benchmark's CPU dry run (`benchmarks/trainer_gpu/attention.py`).
It lives here, in the trainer package, because the CPU form ships it; the benchmark imports it from here
(it puts services/ on its path), so the trainer image carries the function and not the benchmark.
"""

from __future__ import annotations

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
    FlashAttention does when a query segment is the tail of its key segment. GQA by repeating K/V."""
    if window_size not in ((-1, -1), None) or softcap:
        raise NotImplementedError("the SDPA varlen attention supports neither sliding windows nor softcap")
    out = torch.empty_like(q)
    groups = q.shape[1] // k.shape[1]
    for i in range(len(cu_seqlens_q) - 1):
        qs, qe = int(cu_seqlens_q[i]), int(cu_seqlens_q[i + 1])
        ks, ke = int(cu_seqlens_k[i]), int(cu_seqlens_k[i + 1])
        if qe == qs:
            continue
        lq, lk = qe - qs, ke - ks
        mask = None
        if causal:
            mask = torch.arange(lk).unsqueeze(0) <= torch.arange(lq).unsqueeze(1) + (lk - lq)
        out[qs:qe] = F.scaled_dot_product_attention(
            q[qs:qe].transpose(0, 1),
            k[ks:ke].transpose(0, 1).repeat_interleave(groups, dim=0),
            v[ks:ke].transpose(0, 1).repeat_interleave(groups, dim=0),
            attn_mask=mask,
            scale=softmax_scale,
        ).transpose(0, 1)
    return out
