"""Which dtype the trainer trains in at the production defaults, and what the float32 master copy costs (pure).

The optimizer step itself runs in the trainer image: tests/integration/trainer/test_weights_move.py.
"""

import pytest

from stack.readers import trainer as config
from stack.sizing import precision
from stack.sizing.limits import derive_limits, startup_report

MODEL = "Qwen/Qwen3-1.7B"
H200 = 139.8


def test_production_defaults_keep_a_float32_master_copy_and_compute_in_bfloat16():
    s = config.from_env({})
    chosen = precision.choose(s.weight_transfer, s.dtype)
    assert (s.weight_transfer, s.learning_rate) == ("nccl", 1e-6)
    assert chosen == precision.Precision(weights="float32", compute="bfloat16")
    assert chosen.trl_kwargs() == {"dtype": "float32", "bf16": True, "fp16": False}
    assert precision.warning(chosen, s.learning_rate) is None
    # The CPU form: the mock engine serves float32, no autocast.
    cpu = precision.choose("mock", config.from_env({"WEIGHT_TRANSFER": "mock"}).dtype)
    assert cpu.trl_kwargs() == {"dtype": "float32", "bf16": False, "fp16": False}


def test_bfloat16_weights_at_the_default_rate_are_named_as_not_moving():
    # Half an ulp of a bfloat16 w in [2**e, 2**(e+1)) is 2**(e-8): a 1e-6 step is lost from |w| >= 2.56e-4 on.
    assert precision.smallest_stuck_weight("bfloat16", 1e-6) == pytest.approx(2.56e-4)
    line = precision.warning(precision.choose("nccl", "bfloat16"), 1e-6)
    assert line.startswith("TRAIN_DTYPE=bfloat16 with LEARNING_RATE=1e-06: an AdamW step rounds back")
    assert "set TRAIN_DTYPE=float32" in line
    assert precision.warning(precision.choose("nccl", "bfloat16"), 1e-2) is None  # a step that large does move


def test_the_master_copy_costs_what_the_arithmetic_says():
    shape = precision.SHAPES[MODEL]
    assert shape.params == 1_720_574_976
    cost = precision.master_weight_cost(shape, precision.choose("nccl", "float32"))
    # 8 bytes more per parameter (weights, gradients, two AdamW moments: +2 each) + a bfloat16 cast cache (2 bytes).
    assert cost.fixed_gib == pytest.approx(10 * shape.params / 2**30)  # 16.02 GiB
    assert round(cost.fixed_gib, 2) == 16.02
    # The float32 residual stream doubles the per-layer checkpoints: 2 bytes x 2048 x 28 layers per token.
    assert round(cost.gib_per_1k_tokens, 4) == 0.1068
    same = precision.master_weight_cost(shape, precision.choose("nccl", "bfloat16"))
    assert (same.fixed_gib, same.gib_per_1k_tokens) == (0.0, 0.0)


def test_startup_report_plans_with_the_computed_cost_and_says_it_is_computed():
    bf16 = derive_limits(H200, MODEL, precision=precision.choose("nccl", "bfloat16"))
    fp32 = derive_limits(H200, MODEL, precision=precision.choose("nccl", "float32"))
    assert (
        bf16.profile.fixed_gib == 12.5 and bf16.token_budget == 381_402 // 1024 * 1024
    )  # capped at the longest measured row
    assert round(fp32.profile.fixed_gib, 2) == 28.52 and round(fp32.profile.gib_per_1k_tokens, 4) == 0.3068
    # (139.8 x 0.92 - 4 - 28.52) / 0.3068 GiB per 1k tokens
    assert fp32.max_packed_tokens == 313_195 and fp32.token_budget == 312_320
    info, warnings = startup_report(fp32, 12, 32768)
    assert "28.5 GiB fixed + 0.307 GiB per 1k tokens: measured in bfloat16 on NVIDIA H200" in info[0]
    assert "+16.0 GiB fixed and +0.107 GiB per 1k tokens computed, not measured" in info[0]
    assert warnings == []
    # An 80 GB card still holds the default TOKEN_BUDGET with the master copy.
    assert derive_limits(79.2, MODEL, precision=precision.choose("nccl", "float32")).token_budget >= 32768
