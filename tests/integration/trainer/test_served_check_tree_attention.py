"""The served-weights canary is scored by the trainer's own model, which AsyncGRPO runs under TRL's tree attention.

TRL 1.16.0's `tree_attention` takes the packed tree's layout as required keyword arguments: a plain forward of the
trainer's model raised "tree_attention() missing 5 required keyword-only arguments" at the first canary of a dry run
of tests/gpu/learn (the served check had only been tested against a model with the default attention). The canary is
one sequence: a tree of one path must give the same logprobs as the default attention.
"""

from __future__ import annotations

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM
from trl.experimental.async_grpo import packing

from trainer.device import cpu_form
from trainer.transfer.served_check import model_scorer


def test_the_canary_scores_the_same_under_tree_attention_as_under_the_default():
    cpu_form.install()  # the CPU form's varlen kernel behind TRL's tree attention, as the trainer runs it here
    packing.register_tree_attention()
    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=100,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
    )
    model = Qwen3ForCausalLM(config)
    ids = list(range(5, 25))
    default = model_scorer(model)(ids, 6)
    model.set_attn_implementation(packing.TREE_ATTENTION)
    assert model.config._attn_implementation == "tree_fa3"
    tree = model_scorer(model)(ids, 6)
    assert len(tree) == 6
    assert max(abs(a - b) for a, b in zip(default, tree)) < 1e-4
