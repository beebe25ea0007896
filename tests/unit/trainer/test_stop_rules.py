"""Stop rules over known metric sequences: the exact step each rule trips at and the line it prints.

The metric sequences are the trainer's own `logs` dicts, key for key (TRL's `rollout/fork_frac`, the
worker's `harbor/*`). No TRL here: the callback's save-and-stop is exercised by the in-image trainer
test (tests/integration/trainer/test_cpu_training.py) with a forced-forking mock engine.
"""

import pytest

from trainer.watch.stop_rules import EnvError, StopRules, from_env

HEALTHY = {"rollout/fork_frac": 0.0, "harbor/unscorable_frac": 0.0, "harbor/zero_spread_frac": 0.5}


def feed(rules: StopRules, steps: list[dict]):
    for step, logs in enumerate(steps, start=1):
        tripped = rules.observe(step, logs)
        if tripped:
            return tripped
    return None


def test_defaults_stop_a_fully_forked_run_at_the_fifth_step_with_the_rule_figures_and_fix():
    rules = from_env({})
    tripped = feed(rules, [{**HEALTHY, "rollout/fork_frac": 1.0}] * 20)
    assert tripped.step == 5 and tripped.rule.name == "STOP_FORKING_FRAC"
    assert tripped.line == (
        "trainer: STOPPED by rule STOP_FORKING_FRAC at step 5: 100% of turn transitions forked (re-rendered "
        "prompts) over the last 5 steps (100%, 100%, 100%, 100%, 100%), threshold 50%. Checkpoint saved; fix: "
        "the engine or chat template re-renders what it sampled: check the engine's capture level "
        "(scripts/status) and the chat template (REASONING_PARSER, CHAT_TEMPLATE_KWARGS); then resume with "
        "RUN_NAME (or set STOP_FORKING_FRAC=off)"
    )
    status = tripped.as_status()
    assert status["rule"] == "STOP_FORKING_FRAC" and status["window"] == [1.0] * 5 and status["mean"] == 1.0


def test_a_healthy_run_never_trips():
    # The CPU form's shape: chained rollouts, everything scored, about half the groups without spread.
    assert feed(from_env({}), [HEALTHY] * 200) is None


def test_steps_without_evidence_neither_count_nor_reset_the_window():
    # TRL logs no fork_frac for a window with no multi-turn rollout; those steps are skipped.
    forked = {"rollout/fork_frac": 1.0}
    steps = [forked, {}, forked, {"rollout/fork_frac": None}, forked, {"rollout/fork_frac": float("nan")}, forked]
    tripped = feed(StopRules({"STOP_FORKING_FRAC": 0.5}, window=4), steps)
    assert tripped and tripped.step == 7 and tripped.window == (1.0, 1.0, 1.0, 1.0)


def test_the_mean_over_the_window_decides_not_one_bad_step():
    rules = StopRules({"STOP_UNSCORABLE_FRAC": 0.9}, window=3)
    steps = [{"harbor/unscorable_frac": v} for v in (1.0, 1.0, 0.5, 1.0, 1.0, 1.0)]
    tripped = feed(rules, steps)
    # windows: (1, 1, .5) .83; (1, .5, 1) .83; (.5, 1, 1) .83; (1, 1, 1) 1.0 -> step 6
    assert tripped.step == 6 and tripped.rule.name == "STOP_UNSCORABLE_FRAC" and tripped.mean == 1.0
    assert "100% of rollouts unscorable (sandbox or verifier failed) over the last 3 steps" in tripped.line


def test_zero_spread_trips_only_when_every_group_had_none():
    rules = from_env({"STOP_WINDOW_STEPS": "3"})
    assert feed(rules, [{"harbor/zero_spread_frac": v} for v in (1.0, 1.0, 0.9, 1.0, 1.0)]) is None
    tripped = rules.observe(6, {"harbor/zero_spread_frac": 1.0})
    assert tripped.step == 6 and tripped.rule.name == "STOP_ZERO_SPREAD_FRAC"


def test_once_tripped_it_stays_tripped():
    rules = StopRules({"STOP_FORKING_FRAC": 0.5}, window=1)
    first = rules.observe(1, {"rollout/fork_frac": 1.0})
    assert rules.observe(2, {"rollout/fork_frac": 0.0}) is first


def test_off_disables_a_rule():
    rules = from_env({"STOP_FORKING_FRAC": "off", "STOP_WINDOW_STEPS": "1"})
    assert "STOP_FORKING_FRAC" not in rules.thresholds
    assert rules.observe(1, {"rollout/fork_frac": 1.0}) is None
    assert rules.describe() == (
        "stop rules over 1 steps: STOP_UNSCORABLE_FRAC=0.9, STOP_ZERO_SPREAD_FRAC=1, STOP_STALE_FRAC=0.5, "
        "STOP_MISMATCH_KL=0.02"
    )


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"STOP_FORKING_FRAC": "50%"}, "STOP_FORKING_FRAC='50%' must be a fraction in (0, 1] (default 0.5) or 'off'"),
        ({"STOP_UNSCORABLE_FRAC": "0"}, "STOP_UNSCORABLE_FRAC='0' must be a fraction in (0, 1]"),
        ({"STOP_ZERO_SPREAD_FRAC": "1.5"}, "STOP_ZERO_SPREAD_FRAC='1.5' must be a fraction in (0, 1]"),
        (
            {"STOP_WINDOW_STEPS": "0"},
            "STOP_WINDOW_STEPS='0' is below 1: set it in .env to a whole number of steps >= 1",
        ),
        ({"STOP_WINDOW_STEPS": "2.5"}, "STOP_WINDOW_STEPS='2.5' is not a whole number: set it in .env to a whole"),
    ],
)
def test_bad_settings_are_refused_with_the_fix(env, message):
    with pytest.raises(EnvError) as exc:
        from_env(env)
    assert str(exc.value).startswith(message)


def test_the_end_of_training_summary_trips_nothing():
    """transformers' summary log comes after the last step, and TRL fills it with the figures of groups never trained
    on (trainer/watch/summary_log.py): it must not turn a finished run into a stopped one (the first full learning-gate
    run ended `stopped-by-rule` at its last step that way)."""
    rules = StopRules({"STOP_FORKING_FRAC": 0.5}, window=2)
    assert feed(rules, [{"rollout/fork_frac": 1.0}]) is None
    assert rules.observe(1, {"train_runtime": 81.5, "train_loss": 0.02, "rollout/fork_frac": 1.0}) is None
    assert rules.observe(2, {"rollout/fork_frac": 1.0}).step == 2  # a step's own log still counts
