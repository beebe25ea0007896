"""A Qwen3-1.7B-shaped model with random weights and the project's own tokenizer, made on the GPU machine.

    python tests/gpu/build_model.py OUT_DIR

Nothing comes from the Hub (the GPU machine has no network). The body is Qwen3-1.7B's published shape
(hidden 2048, 28 layers, 16 heads, 8 KV heads, intermediate 6144), so engine start, weight-sync size and
step time are the production model's; the vocabulary is the mock engine's character-level tokenizer
(mock_engine.tokenizer), whose every tokenization is canonical, so a multi-turn rollout chains exactly
instead of forking on a non-canonical split of random text. With 100 tokens instead of 151,936 the
embeddings shrink from 0.62B to 0.4M parameters: 1.41B parameters in all, bf16.

The output head is drawn wider than the body (HEAD_STD, for the mock engine's reason: with the usual
0.02 the next-token distribution is nearly uniform and OpenEnv's processed-vs-raw probe cannot measure a
top-two gap); 0.06 over hidden 2048 gives logits of about the mock model's spread.
"""

from __future__ import annotations

import sys
from pathlib import Path

SEED = 0
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


def build(out_dir: str | Path) -> Path:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from mock_engine.tokenizer import build_tokenizer

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        dtype="bfloat16",
        **SHAPE,
    )
    torch.manual_seed(SEED)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = Qwen3ForCausalLM(config).to(torch.bfloat16)
        with torch.no_grad():
            model.lm_head.weight.normal_(0.0, HEAD_STD)
    # Stop on <|im_end|> only. vLLM stops on every generation-config EOS; a turn that ended on <|endoftext|> is
    # re-rendered by the chat template with <|im_end|> in its place, so the next turn's prompt no longer extends it
    # and the rollout forks (seen here: half the 3-turn rollouts of a first run forked until this was one id).
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


if __name__ == "__main__":
    print(f"built {build(sys.argv[1])}", file=sys.stderr)
