"""One optimizer step at the production defaults moves the weights it should.

The production path: stack.readers.trainer's defaults (WEIGHT_TRANSFER=nccl, LEARNING_RATE=1e-6, TRAIN_DTYPE) ->
stack.sizing.precision -> the AsyncGRPOConfig kwargs the trainer passes (dtype, bf16) -> the optimizer transformers builds
from that config (its default AdamW) -> forward/backward under the autocast the config asks for -> gradient clipping
at the config's max_grad_norm -> one step. The model is a small Qwen3 built locally (no download) with Qwen3's own
initialiser (std 0.02 matrices, norm gains 1.0): a CPU stands in for the GPU, and bfloat16 rounding is the same there.

Which weights a step should move: Adam's first step is lr * m / (sqrt(v) + eps) = lr * g / (|g| + eps), so every
element whose gradient is well above eps (|g| > 1e-6 here: step > 0.99 lr) gets a step of ~1e-6. In float32 that
is above half an ulp of any |w| < 8, i.e. of every weight of this model: all of them must move (>= 99.9%, leaving
room for a gradient that is exactly zero after clipping). In bfloat16 (main's default) only |w| < 2.56e-4 can: about
1% of a 0.02-scale matrix and no norm gain.

Runs in the trainer image: tests/run-in-image trainer -q tests/integration/trainer/test_weights_move.py
"""

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM, Trainer
from trl.experimental.async_grpo import AsyncGRPOConfig

from stack.readers import trainer as config
from stack.sizing import precision

MOVED_AT_LEAST = 0.999


def production_step(tmp_path):
    s = config.from_env({})
    chosen = precision.choose(s.weight_transfer, s.dtype)
    args = AsyncGRPOConfig(
        output_dir=str(tmp_path),
        learning_rate=s.learning_rate,
        report_to="none",
        use_cpu=True,  # the CPU stands in for the GPU: same config otherwise
        **chosen.trl_kwargs(),
    )
    torch.manual_seed(0)
    shape = Qwen3Config(
        vocab_size=512,
        hidden_size=128,
        intermediate_size=384,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        tie_word_embeddings=True,
    )
    model = Qwen3ForCausalLM(shape).to(getattr(torch, args.dtype))
    optim_cls, optim_kwargs = Trainer.get_optimizer_cls_and_kwargs(args, model)
    optim_kwargs.pop("fused", None)  # the fused kernel is CUDA-only; the arithmetic is the same
    optimizer = optim_cls(model.parameters(), **optim_kwargs)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    ids = torch.randint(0, shape.vocab_size, (4, 64), generator=torch.Generator().manual_seed(1))
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
        logits = model(ids).logits.float()
    # A policy-gradient-shaped loss: sampled tokens' logprobs weighted by +-1 advantages.
    logps = torch.log_softmax(logits[:, :-1], -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    loss = -(logps * torch.tensor([1.0, -1.0, 0.5, -0.5])[:, None]).mean()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
    optimizer.step()
    return s, chosen, model, before


def test_one_step_at_the_production_defaults_moves_every_weight_with_a_gradient(tmp_path):
    s, chosen, model, before = production_step(tmp_path)
    moved = should = 0
    norm_moved = norm_should = 0
    for name, param in model.named_parameters():
        live = param.grad.abs().float() > 1e-6
        changed = (param.detach() != before[name]) & live
        moved, should = moved + int(changed.sum()), should + int(live.sum())
        if name.endswith("norm.weight"):
            norm_moved, norm_should = norm_moved + int(changed.sum()), norm_should + int(live.sum())
    frac = moved / should
    print(
        f"TRAIN_DTYPE={s.dtype} ({chosen.describe()}), lr {s.learning_rate:g}: {moved}/{should} = {frac:.2%} of "
        f"weights with a gradient moved; norm gains {norm_moved}/{norm_should}"
    )
    assert param.dtype == getattr(torch, chosen.weights)
    assert frac >= MOVED_AT_LEAST
    assert norm_should > 0 and norm_moved == norm_should
