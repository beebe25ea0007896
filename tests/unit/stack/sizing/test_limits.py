"""The step-limit / token-budget derivation from measured memory, and the startup warning (pure, host venv)."""

import math

import pytest

from stack.sizing.limits import (
    BUDGET_QUANTUM,
    DEFAULT_TURNS,
    GC,
    GC_COMPILE,
    MEASURED,
    MemoryProfile,
    TurnSizes,
    UnknownModel,
    derive_limits,
    startup_report,
)

MODEL = "Qwen/Qwen3-1.7B"
CARD_80, CARD_141 = 79.2, 139.8  # what torch reports for an 80 GB H100 and a 141 GB H200


def test_rollout_length_is_prompt_plus_steps_minus_the_unseen_last_output():
    t = TurnSizes(
        template_tokens=1000,
        task_tokens=500,
        completion_tokens=(100, 300),
        observation_tokens=(200, 1000),
        message_overhead_tokens=10,
    )
    assert t.prompt_tokens == 1510
    assert t.turn_tokens("max") == 300 + 1000 + 20
    assert t.rollout_tokens(1, "max") == 1510 + 1320 - 1010
    assert t.rollout_tokens(5, "mean") == 1510 + 5 * (200 + 600 + 20) - (600 + 10)


def test_max_steps_within_is_the_largest_that_fits():
    for tokens in (5_000, 32_768, 100_000):
        steps = DEFAULT_TURNS.max_steps_within(tokens)
        assert DEFAULT_TURNS.rollout_tokens(steps) <= tokens < DEFAULT_TURNS.rollout_tokens(steps + 1)
    assert DEFAULT_TURNS.max_steps_within(100) == 0


@pytest.mark.parametrize("bad", [(0, 10), (300, 100)])
def test_turn_sizes_reject_bad_ranges(bad):
    with pytest.raises(ValueError, match="completion_tokens"):
        TurnSizes(completion_tokens=bad)


@pytest.mark.parametrize("card", [CARD_80, CARD_141])
@pytest.mark.parametrize("setting", [GC_COMPILE, GC])
def test_derived_rows_fit_the_card_with_margin(card, setting):
    limits = derive_limits(card, MODEL, setting=setting)
    profile = MEASURED[MODEL][setting]
    assert limits.profile is profile
    assert profile.peak_gib(limits.max_packed_tokens) <= card * 0.92 - 4.0 + 1e-6
    assert limits.token_budget % BUDGET_QUANTUM == 0 and 0 < limits.token_budget <= limits.max_packed_tokens
    assert limits.bound_by == "memory"
    assert DEFAULT_TURNS.rollout_tokens(limits.max_step_limit) <= limits.token_budget
    assert DEFAULT_TURNS.rollout_tokens(limits.max_step_limit + 1) > limits.token_budget
    assert limits.typical_step_limit >= limits.max_step_limit


def test_bigger_card_longer_rows_but_never_past_what_was_measured():
    small, large = derive_limits(CARD_80, MODEL), derive_limits(CARD_141, MODEL)
    assert small.max_packed_tokens < large.max_packed_tokens
    # 141 GiB would extrapolate past the longest measured row: the derivation stops there.
    assert large.max_packed_tokens == MEASURED[MODEL][GC_COMPILE].largest_measured_tokens


def test_the_engine_context_caps_the_step_limit():
    limits = derive_limits(CARD_80, MODEL, max_model_len=32768)
    assert limits.bound_by == "max_model_len"
    assert limits.max_sample_tokens == 32768
    assert limits.max_step_limit == DEFAULT_TURNS.max_steps_within(32768)
    assert limits.token_budget > 32768  # rows still pack several samples up to the memory limit


def test_memory_bound_limit_from_a_given_profile():
    profile = MemoryProfile(fixed_gib=10.0, gib_per_1k_tokens=1.0, measured_on="test", largest_measured_tokens=10**6)
    limits = derive_limits(40.0, "m", profiles={"m": {GC_COMPILE: profile}})
    assert limits.max_packed_tokens == math.floor((40.0 * 0.92 - 4.0 - 10.0) * 1000)
    assert limits.max_step_limit == DEFAULT_TURNS.max_steps_within(limits.token_budget)


def test_unmeasured_model_says_how_to_measure_it():
    with pytest.raises(UnknownModel, match="scripts/bench-trainer-gpu"):
        derive_limits(CARD_80, "Qwen/Qwen3-8B")
    with pytest.raises(UnknownModel, match="'offload'"):
        derive_limits(CARD_80, MODEL, setting="offload")


def test_card_memory_must_be_positive():
    with pytest.raises(ValueError, match="GiB"):
        derive_limits(0, MODEL)


def test_stack_defaults_raise_no_warning_on_an_80_gib_card():
    limits = derive_limits(CARD_80, MODEL, max_model_len=32768)
    info, warnings = startup_report(limits, step_limit=12, token_budget=32768)
    assert warnings == []
    assert any(f"AGENT_STEP_LIMIT={limits.max_step_limit}" in line for line in info)


def test_step_limit_over_the_safe_one_warns_and_names_the_fix():
    limits = derive_limits(CARD_80, MODEL, max_model_len=32768)
    _, warnings = startup_report(limits, step_limit=58, token_budget=32768)
    assert len(warnings) == 1
    assert "AGENT_STEP_LIMIT=58" in warnings[0] and f"AGENT_STEP_LIMIT<={limits.max_step_limit}" in warnings[0]
    assert "max_model_len" in warnings[0]


def test_memory_bound_step_limit_warns_of_oom():
    limits = derive_limits(CARD_80, MODEL)
    _, warnings = startup_report(limits, step_limit=limits.max_step_limit + 1, token_budget=limits.token_budget)
    assert any("run out of GPU memory" in w or "dropped by TRL" in w for w in warnings)


def test_budget_above_the_card_warns():
    limits = derive_limits(CARD_80, MODEL)
    _, warnings = startup_report(limits, step_limit=12, token_budget=limits.max_packed_tokens + 50_000)
    assert any(f"TOKEN_BUDGET<={limits.token_budget}" in w for w in warnings)


def test_budget_shorter_than_a_rollout_warns_about_drops():
    limits = derive_limits(CARD_80, MODEL, max_model_len=32768)
    _, warnings = startup_report(limits, step_limit=12, token_budget=16384)
    assert len(warnings) == 1 and "batch/dropped_oversize" in warnings[0]
    assert f"AGENT_STEP_LIMIT to {DEFAULT_TURNS.max_steps_within(16384)}" in warnings[0]
