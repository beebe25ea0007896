"""Build the mock engine's model and tokenizer into a Hugging Face folder, deterministically, offline.

    python -m mock_engine.build_model /app/models/tiny-agent

Run at image build time, so the mock engine and the CPU trainer (built FROM the mock engine's image)
load the very same weights with `from_pretrained`. A Qwen3 causal LM (the production family) with two
layers and hidden size 64: real attention, a real KV cache, real log-probabilities, and fast enough on
two CPU cores.

Qwen3 and not Qwen2 for a measured reason: transformers 5.17's AutoTokenizer lists qwen2 among the
model types whose saved tokenizer class it distrusts, and rebuilds a byte-level BPE Qwen2Tokenizer
(with its pre-tokenizer and NFC) instead of loading our tokenizer.json, which silently dropped every
space. For qwen3 it loads tokenizer.json as saved (tests/integration/mock_engine check the round trip).

The output head is initialised wider than the body (LM_HEAD_STD) on purpose: with the usual 0.02 the
next-token distribution is almost uniform, and OpenEnv's processed-vs-raw logprob probe declines to
measure a top-two gap under 0.5. A wider head makes the temperature scaling measurable; much wider
(>= 1.0, measured) makes almost every prompt near-deterministic, and a group of rollouts identical.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

# Chosen (among seeds 0-11, measured at this head scale) so that OpenEnv's logprobs-mode probe prompt
# ("Reply with exactly: hello") has a top-two gap of 1.34 nats at T=1, well above the 0.5 the probe needs
# to measure, while other prompts keep top-token probabilities of 0.46-0.92, so samples stay diverse.
SEED = 7
HIDDEN = 64
LAYERS = 2
HEADS = 4
KV_HEADS = 2
INTERMEDIATE = 192
MAX_POSITIONS = 32768
LM_HEAD_STD = 0.5


def qwen3_config(tokenizer):
    """The shape both CPU-form models share (this one and the learnable policy, build_policy): the trainer's
    CPU budget and the engine's speed are measured on it."""
    from transformers import Qwen3Config

    return Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        head_dim=HIDDEN // HEADS,
        max_position_embeddings=MAX_POSITIONS,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        dtype="float32",
    )


def build(out_dir: str | Path) -> Path:
    import torch
    from transformers import Qwen3ForCausalLM

    from mock_engine.tokenizer import build_tokenizer

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    config = qwen3_config(tokenizer)
    torch.manual_seed(SEED)
    model = Qwen3ForCausalLM(config)
    with torch.no_grad():
        generator = torch.Generator().manual_seed(SEED)
        model.lm_head.weight.copy_(torch.randn(model.lm_head.weight.shape, generator=generator) * LM_HEAD_STD)
    model.generation_config.eos_token_id = [tokenizer.eos_token_id, tokenizer.pad_token_id]
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / "mock_engine.json").write_text(json.dumps({"seed": SEED, "lm_head_std": LM_HEAD_STD}) + "\n")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", help="folder to write the model and tokenizer into")
    args = parser.parse_args(argv)
    out = build(args.out_dir)
    print(f"mock_engine: built {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
