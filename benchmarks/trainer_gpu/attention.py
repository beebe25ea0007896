"""The varlen kernel under TRL's tree attention, on a GPU that cannot reach the Hub.

TRL 1.16.0's `packing.tree_attention` gathers each segment's root-to-segment K/V path and calls
`flash_attn_varlen_func` of FlashAttention-3, fetched at first use by `kernels.get_kernel("kernels-community/flash-attn3")`
from the Hugging Face Hub. The benchmark GPU has no network, so this swaps in the FlashAttention-2 varlen kernel
that PyTorch itself ships (`aten._flash_attention_forward`, differentiable through `_flash_attention_backward`):
same arguments, same bottom-right causal alignment, GQA without repeating K/V. Everything else in
`tree_attention` (the path gather, the masking rule) stays TRL's. FA3 is faster on Hopper, so times measured with
this kernel are an upper bound on what the production image (FA3 from the Hub) spends in attention.

`check()` proves the swap computes TRL's tree-masked attention before anything is timed: it packs forked samples
with TRL's own `TreeRow`, runs `tree_attention` and compares output and gradients with a dense SDPA reference whose
mask is built from each token's root-to-token path.
"""

from __future__ import annotations

import types

import torch
import torch.nn.functional as F

from trainer.device import varlen_sdpa  # the CPU form's function: one definition for both


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
    if softcap:
        raise NotImplementedError("PyTorch's FlashAttention-2 varlen kernel has no softcap (Qwen3 needs none)")
    left, right = window_size if window_size not in (None, (-1, -1)) else (None, None)
    out, *_rest = torch.ops.aten._flash_attention_forward(
        q,
        k,
        v,
        cu_seqlens_q,
        cu_seqlens_k,
        int(max_seqlen_q),
        int(max_seqlen_k),
        0.0,
        causal,
        False,
        scale=softmax_scale,
        window_size_left=left,
        window_size_right=right,
    )
    return out


def install() -> str:
    """Route TRL's tree attention to PyTorch's FA2 varlen kernel on CUDA (to a per-segment SDPA on CPU)."""
    from trl.experimental.async_grpo import packing

    if torch.cuda.is_available():
        packing._flash_attn = lambda: types.SimpleNamespace(flash_attn_varlen_func=flash_attn_varlen_func)
        return "FlashAttention-2 varlen (torch aten) under TRL tree_attention"
    packing._flash_attn = lambda: types.SimpleNamespace(flash_attn_varlen_func=varlen_sdpa.flash_attn_varlen_func)
    return "per-segment SDPA (CPU dry run) under TRL tree_attention"


def _dense_reference(q, k, v, row):
    """SDPA over the packed row with each token allowed exactly its root-to-token path (itself included)."""
    n = q.shape[2]
    kv_index, cu_q, cu_k = row["tree_kv_index"], row["tree_cu_seqlens_q"], row["tree_cu_seqlens_k"]
    allowed = torch.zeros(n, n, dtype=torch.bool)
    for s in range(len(cu_q) - 1):
        q0, q1, k0, k1 = (int(x) for x in (cu_q[s], cu_q[s + 1], cu_k[s], cu_k[s + 1]))
        path = kv_index[k0:k1]
        for j in range(q1 - q0):
            allowed[q0 + j, path[: (k1 - k0) - (q1 - q0) + j + 1]] = True
    groups = q.shape[1] // k.shape[1]
    return F.scaled_dot_product_attention(
        q, k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1), attn_mask=allowed.to(q.device)
    )


def check(device: str = "cuda", heads: int = 16, kv_heads: int = 8, head_dim: int = 128) -> dict:
    """Relative error of TRL's tree attention (with the installed kernel) against the dense path-mask reference."""
    import numpy as np
    from trl.experimental.async_grpo.packing import TreeRow, tree_attention

    from .trajectories import forked_samples, rollout_sample, trajectory

    vocab = 1000
    row = TreeRow()
    for g in range(2):  # two groups: a shared template across groups, then a fork per turn inside each
        small = trajectory(seed=g, steps=3, vocab=vocab)
        small.prompt = small.prompt[:120]
        small.completions = [c[:40] for c in small.completions]
        small.observations = [o[:60] for o in small.observations]
        for i, (ids, mask) in enumerate(forked_samples(small, vocab)):
            s = rollout_sample(ids, mask, group_id=g, seed=i, vocab=vocab)
            row.add(
                {
                    "input_ids": s.input_ids,
                    "completion_mask": s.completion_mask,
                    "old_log_probs": s.old_log_probs,
                    "advantage": s.advantage,
                    "group_id": g,
                }
            )
    packed = row.pack()
    n = len(packed["input_ids"])
    gen = torch.Generator().manual_seed(0)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    q, k, v = (
        torch.randn(1, h, n, head_dim, generator=gen).to(device, dtype).requires_grad_()
        for h in (heads, kv_heads, kv_heads)
    )
    kw = {key: packed[key].to(device) for key in ("tree_kv_index", "tree_cu_seqlens_q", "tree_cu_seqlens_k")}
    kw["tree_max_seqlen_q"], kw["tree_max_seqlen_k"] = packed["tree_max_seqlens"].tolist()
    module = torch.nn.Linear(1, 1).to(device, dtype)  # get_target_dtype reads a Linear's dtype for fp32 queries
    module.config = types.SimpleNamespace()
    out, _ = tree_attention(module, q, k, v, None, scaling=head_dim**-0.5, **kw)  # (1, N, H, D)
    grad = torch.randn(out.shape, generator=gen).to(device, dtype)
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), grad)
    qf, kf, vf = (x.detach().double().cpu().requires_grad_() for x in (q, k, v))
    ref = _dense_reference(qf, kf, vf, packed)
    ref = ref.transpose(1, 2)
    rq, rk, rv = torch.autograd.grad(ref, (qf, kf, vf), grad.double().cpu())

    def rel(a, b):
        a, b = a.detach().double().cpu(), b.detach().double().cpu()
        return float((a - b).norm() / b.norm())

    errors = {"out": rel(out, ref), "dq": rel(dq, rq), "dk": rel(dk, rk), "dv": rel(dv, rv)}
    errors["tokens"] = n
    errors["segments"] = len(packed["tree_cu_seqlens_q"]) - 1
    if not all(np.isfinite(errors[x]) and errors[x] < 2e-2 for x in ("out", "dq", "dk", "dv")):
        raise AssertionError(f"tree attention does not match the path-mask reference: {errors}")
    return errors
