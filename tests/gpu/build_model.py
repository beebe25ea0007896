"""A Qwen3-1.7B-shaped model with random weights and the project's own tokenizer, made on the GPU machine.

    python tests/gpu/build_model.py OUT_DIR

Nothing comes from the Hub (the GPU machine has no network). The body is Qwen3-1.7B's published shape
(hidden 2048, 28 layers, 16 heads, 8 KV heads, intermediate 6144), so engine start, weight-sync size and
step time are the production model's; the vocabulary is the mock engine's character-level tokenizer
(mock_engine.tokenizer), whose every tokenization is canonical, so a multi-turn rollout chains exactly
instead of forking on a non-canonical split of random text. With 100 tokens instead of 151,936 the
embeddings shrink from 0.62B to 0.4M parameters: 1.41B parameters in all, bf16.

Every weight is drawn here, on the CPU, from seeded generators, in parameter-name order, never by
transformers' initialisers or on the GPU: the same script then gives the same weights on the GPU machine
and on a CPU-only CI host (CUDA's generator draws other numbers than the CPU's for one seed, and an
initialiser may change between transformers releases; torch's scalar and AVX2 normal samplers may differ
in a float32 ulp, which moves a bf16 weight at most one bf16 step). That is what lets the CPU test
(tests/integration/gpu_check) grade, with the production probe, the very model the GPU check serves.

The output head is drawn wider than the body (HEAD_STD, for the mock engine's reason: with the usual
0.02 the next-token distribution is nearly uniform and the probe cannot measure a top-two gap); 0.06 over
hidden 2048 gives logits of about the mock model's spread. Its seed (HEAD_SEED) is chosen, as the mock
engine's seed is, so that the probe's temperature prompt has a top-two gap well above the probe's 0.5:
the head used before (drawn on the GPU) gave that prompt 0.375 on real vLLM, and the engine never came up.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

# The body's seed and std: the distribution of transformers' own Qwen3 initialisation (normal with
# initializer_range 0.02; RMSNorm gains 1), drawn by us so that it cannot change under us.
SEED = 0
INIT_STD = 0.02
# Measured over head seeds 0-15 with the body above (CPU, float32 forward of the bf16 weights, the probe's
# prompt "Reply with exactly: hello" through the mock tokenizer's chat template): seed 0 gives a top-two gap
# of 4.63 at temperature 1, the largest of the 16 (12 gave >= 0.5; tests/gpu/README.md lists them).
# tests/integration/gpu_check asserts it, with a margin over the probe's bar for vLLM's bf16.
HEAD_SEED = 0
HEAD_STD = 0.06
SHAPE = dict(
    hidden_size=2048,
    num_hidden_layers=28,
    num_attention_heads=16,
    num_key_value_heads=8,
    head_dim=128,
    intermediate_size=6144,
    max_position_embeddings=40960,
    rope_theta=1_000_000.0,
    rms_norm_eps=1e-6,
    hidden_act="silu",
    tie_word_embeddings=False,
)


def config(tokenizer):
    from transformers import Qwen3Config

    return Qwen3Config(
        vocab_size=len(tokenizer),
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        dtype="bfloat16",
        **SHAPE,
    )


def draw_weights(model, seed: int = SEED, head_seed: int = HEAD_SEED) -> None:
    """Fill every parameter from CPU generators: the body from `seed`, the output head from `head_seed`."""
    import torch

    body = torch.Generator().manual_seed(seed)
    head = torch.Generator().manual_seed(head_seed)
    params = sorted(model.named_parameters())
    # One float32 scratch buffer drawn into in place, not two fresh tensors per parameter: the 1.41B draws
    # dominate the build on a CI host's two cores (the same numbers either way).
    scratch = torch.empty(max(p.numel() for _, p in params), dtype=torch.float32)
    with torch.no_grad():
        for name, param in params:
            if param.ndim == 1:  # RMSNorm gains (Qwen3 has no biases)
                param.fill_(1.0)
                continue
            draw = scratch[: param.numel()].view(param.shape)
            if name == "lm_head.weight":
                torch.randn(param.shape, generator=head, out=draw).mul_(HEAD_STD)
            else:
                torch.randn(param.shape, generator=body, out=draw).mul_(INIT_STD)
            param.copy_(draw)


def build(out_dir: str | Path) -> Path:
    import torch
    from transformers import Qwen3ForCausalLM

    from mock_engine.tokenizer import build_tokenizer

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    # Built on the meta device and materialised uninitialised: transformers' own initialisation of 1.41B
    # parameters would be thrown away by draw_weights anyway. Non-persistent buffers (rotary frequencies)
    # are left unset here and never saved; from_pretrained and vLLM compute them.
    with torch.device("meta"):
        model = Qwen3ForCausalLM(config(tokenizer)).to(torch.bfloat16)
    model = model.to_empty(device="cpu")
    draw_weights(model)
    # Stop on <|im_end|> only. vLLM stops on every generation-config EOS; a turn that ended on <|endoftext|> is
    # re-rendered by the chat template with <|im_end|> in its place, so the next turn's prompt no longer extends it
    # and the rollout forks (seen here: half the 3-turn rollouts of a first run forked until this was one id).
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / "gpu_check_model.json").write_text(
        json.dumps({"seed": SEED, "init_std": INIT_STD, "head_seed": HEAD_SEED, "head_std": HEAD_STD}) + "\n"
    )
    return out


if __name__ == "__main__":
    print(f"built {build(sys.argv[1])}", file=sys.stderr)
