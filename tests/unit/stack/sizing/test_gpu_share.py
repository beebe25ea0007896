"""The one-GPU memory split (stack/sizing/gpu_share.py): exact figures from the measured profile in stack/sizing/limits.py
(Qwen3-1.7B, gradient checkpointing + compile, measured in bf16 on an H200) with the float32 master weights' computed
extra, and the refusal's one line."""

from __future__ import annotations

import pytest

from stack.sizing import gpu_share, limits
from stack.sizing.precision import Precision

MODEL = "Qwen/Qwen3-1.7B"
FP32 = Precision(weights="float32", compute="bfloat16")


def test_kv_cache_per_token_from_the_models_config():
    # 2 (K, V) x 28 layers x 8 KV heads x 128 x 2 bytes = 114,688 bytes a token.
    assert gpu_share.kv_gib_per_token(MODEL) == 114_688 / 2**30


def test_an_80_gib_card_at_the_default_budget():
    plan = gpu_share.split(79.2, MODEL, 32768, 32768, FP32)
    profile = limits.with_precision(limits.MEASURED[MODEL][limits.GC_COMPILE], MODEL, FP32)
    trainer = profile.fixed_gib + profile.gib_per_1k_tokens * 32.768 + limits.RESERVED_GIB
    assert plan.trainer_gib == pytest.approx(trainer) == pytest.approx(42.58, abs=0.01)
    # (79.2 x 0.92 - 42.58) / 79.2 = 0.3824 -> rounded DOWN to 0.38.
    assert plan.engine_fraction == pytest.approx(0.38)
    assert plan.weights_gib == pytest.approx(1_720_574_976 * 2 / 2**30)
    assert plan.kv_gib == pytest.approx(32768 * 114_688 / 2**30) == pytest.approx(3.5)
    assert plan.engine_gib + plan.trainer_gib <= 79.2 * limits.USABLE_FRACTION


@pytest.mark.parametrize(("card", "fraction"), [(79.2, 0.47), (139.8, 0.66)])
def test_a_smaller_budget_leaves_the_engine_more(card, fraction):
    assert gpu_share.split(card, MODEL, 8192, 32768, FP32).engine_fraction == pytest.approx(fraction)


def test_a_card_too_small_is_one_line_with_every_number():
    with pytest.raises(gpu_share.DoesNotFit) as exc:
        gpu_share.split(23.6, MODEL, 8192, 32768, FP32)
    assert str(exc.value) == (
        "one GPU of 23.6 GiB is too small for Qwen/Qwen3-1.7B with engine and trainer on it: 23.6 x 0.92 usable = "
        "21.7 GiB < 45.7 GiB needed (trainer 35.0 GiB at TOKEN_BUDGET=8192: 28.5 fixed + 0.307 per 1k tokens + 4 "
        "reserved; engine 10.7 GiB: weights 3.2 + KV cache 3.5 for ENGINE_MAX_MODEL_LEN=32768 + workspace 4 "
        "(estimate)). Lower TOKEN_BUDGET or ENGINE_MAX_MODEL_LEN, use a larger card, or the two-GPU form "
        "(compose.yaml alone)"
    )


def test_the_edge_of_fitting():
    # 47.5 GiB refuses at 8k; the same card fits once the trainer's need drops below what is left.
    with pytest.raises(gpu_share.DoesNotFit):
        gpu_share.split(47.5, MODEL, 8192, 32768, FP32)
    bf16 = gpu_share.split(47.5, MODEL, 8192, 8192, Precision(weights="bfloat16", compute="bfloat16"))
    assert bf16.engine_gib >= bf16.engine_min_gib


def test_fixed_count_micro_batches_plan_one_max_model_len_sample():
    assert gpu_share.split(79.2, MODEL, 0, 16384, FP32).token_budget == 16384


def test_a_model_nobody_measured_is_refused_not_guessed():
    with pytest.raises(limits.UnknownModel, match="no measured memory profile for MODEL='org/other'"):
        gpu_share.split(79.2, "org/other", 8192, 8192, FP32)


def test_the_command_reads_the_settings_as_the_trainer_does(tmp_path, monkeypatch, capsys):
    env = tmp_path / ".env"
    env.write_text("# comment\nTOKEN_BUDGET='8192'\nENGINE_MAX_MODEL_LEN=32768\n")
    for name in ("MODEL", "TOKEN_BUDGET", "ENGINE_MAX_MODEL_LEN", "TRAIN_DTYPE", "TRAINER_COMPILE_LAYERS"):
        monkeypatch.delenv(name, raising=False)
    assert gpu_share.main(["--card-gib", "79.2", "--env-file", str(env)]) == 0
    out = capsys.readouterr()
    assert out.out == "0.47\n" and "TOKEN_BUDGET=8192" in out.err
    monkeypatch.setenv("TOKEN_BUDGET", "abc")  # the environment wins over .env, as compose reads them
    assert gpu_share.main(["--card-gib", "79.2", "--env-file", str(env)]) == 1
    assert capsys.readouterr().err.startswith("one-gpu: TOKEN_BUDGET='abc' is not a whole number")
