"""TRL's stale-sample rule, modelled event by event, and the max_staleness the trainer passes (pure, host venv).

The model's assumptions (trainer/rollouts/staleness.py): 8 generations, 8 rollout slots, rollouts lognormal around 300 s
(cv 0.5), 20 s per optimizer step, TRL's stamping (a group at its first dispatch) and dropping (at dequeue).
"""

from stack.readers import trainer as config
from stack.sizing.limits import DEFAULT_TURNS
from stackstatus import figures
from trainer.rollouts import staleness
from trainer.watch.dropped_samples import DroppedSampleCounter, stale_frac
from trainer.watch.status import METRICS
from trainer.watch.stop_rules import from_env as rules_from_env


def dropped(per_step: int, max_staleness: int, **kw) -> float:
    return staleness.simulate(
        num_generations=8, max_inflight=8, per_step=per_step, max_staleness=max_staleness, **kw
    ).dropped_frac


def test_defaults_fit_two_rollouts_per_step_so_a_group_spans_four_steps():
    s = config.from_env({})
    assert DEFAULT_TURNS.rollout_tokens(s.agent_step_limit, "mean") == 14_815
    per_step = staleness.samples_per_step(s.token_budget, 14_815, s.per_device_train_batch_size, 1)
    assert per_step == 2
    assert staleness.max_staleness_for(s) == 16  # TRL's 4, times the 4 steps one group spans
    assert staleness.max_staleness_for(config.from_env({"MAX_STALENESS": "3"})) == 3
    # Fixed-count batches (TOKEN_BUDGET=0) of a whole group: one step per group, TRL's own default.
    assert staleness.max_staleness_for(config.from_env({"TOKEN_BUDGET": "0"})) == 4


def test_trl_default_drops_most_samples_at_the_default_shape_and_the_derived_bound_does_not():
    before = dropped(2, staleness.TRL_DEFAULT)
    after = dropped(2, staleness.max_staleness_for(config.from_env({})))
    print(f"stale-drop model at 2 samples/step: max_staleness 4 -> {before:.1%}, 16 -> {after:.1%}")
    assert round(before, 3) == 0.598
    assert round(after, 3) == 0.006
    # The other points: 80% at 1 sample per step, none when one step holds a whole group.
    assert round(dropped(1, 4), 3) == 0.797 and dropped(8, 4) == 0.0
    for per_step in (1, 2, 4, 8):
        assert dropped(per_step, staleness.bound(8, per_step)) <= 0.05, per_step


def test_the_kept_samples_never_exceed_the_bound():
    result = staleness.simulate(num_generations=8, max_inflight=8, per_step=2, max_staleness=16)
    assert result.staleness_max <= 16 and result.trained + result.dropped == result.produced


def test_stale_fraction_is_logged_per_step_from_trls_counts():
    assert stale_frac({"sample/dropped_stale_total": 6.0, "batch/samples_per_step": 2.0}) == 0.75
    assert stale_frac({"batch/samples_per_step": 2.0}) == 0.0  # TRL logs no key in a window without drops
    assert stale_frac({"loss": 0.1}) is None  # no step in this window: nothing to say
    logs = {"sample/dropped_stale_total": 1.0, "batch/samples_per_step": 3.0}
    DroppedSampleCounter().observe(logs)
    assert logs["sample/dropped_stale_frac"] == 0.25 and logs["sample/dropped_stale_cumulative"] == 1


def test_a_run_that_drops_most_of_its_samples_stops():
    rules = rules_from_env({"STOP_WINDOW_STEPS": "3"})
    assert rules.thresholds["STOP_STALE_FRAC"] == 0.5
    assert rules.observe(1, {"sample/dropped_stale_frac": 0.6}) is None
    assert rules.observe(2, {"sample/dropped_stale_frac": 0.6}) is None
    tripped = rules.observe(3, {"sample/dropped_stale_frac": 0.6})
    assert tripped.rule.name == "STOP_STALE_FRAC"
    assert tripped.line.startswith(
        "trainer: STOPPED by rule STOP_STALE_FRAC at step 3: 60% of samples dropped as stale"
    )
    assert "raise MAX_STALENESS" in tripped.line
    assert "STOP_STALE_FRAC" not in rules_from_env({"STOP_STALE_FRAC": "off"}).thresholds


def test_status_json_and_scripts_status_carry_the_stale_share():
    assert METRICS["stale_frac"] == "sample/dropped_stale_frac"
    assert figures.stale({"stale_frac": 0.25}) == "dropped stale 25%"
    assert figures.stale({}) == "dropped stale ?"


def test_drop_counter_keeps_run_totals_and_always_logs_them():
    counter = DroppedSampleCounter()
    first = {"loss": 0.1}  # a window without drops: TRL logs no key at all
    counter.observe(first)
    assert first["batch/dropped_oversize_cumulative"] == 0
    counter.observe({"batch/dropped_oversize_total": 2.0, "sample/dropped_stale_total": 1.0})
    counter.observe({"batch/dropped_oversize_total": float("nan")})
    last = {"batch/dropped_oversize_total": 1.0}
    counter.observe(last)
    assert counter.oversize == 3
    assert last["batch/dropped_oversize_cumulative"] == 3 and last["sample/dropped_stale_cumulative"] == 1
