"""The engine-vs-trainer mismatch as a run sees it (host venv, no TRL): its logged name, the STOP_MISMATCH_KL rule's
step and line, the status.json fields, the console line and scripts/status's line, each exact.

The logs dicts are the trainer's own, key for key: TRL 1.16.0's `kl` and `sample/staleness_mean`, and
`mismatch/logprob_absdiff_max` from trainer/watch/mismatch.py. The figure's computation inside TRL's loss step is checked
in the trainer image (tests/integration/trainer/test_mismatch_trl.py).
"""

from __future__ import annotations

import math

import pytest

from stackstatus import figures, report
from trainer.watch import mismatch
from trainer.watch.status import console_line, status_fields
from trainer.watch.stop_rules import EnvError, StopRules, from_env


def step(kl, worst=0.5, staleness=1.0) -> dict:
    """One logged step after mismatch.observe, as the rules and status.json receive it."""
    logs = {"loss": 0.0, "kl": kl, "mismatch/logprob_absdiff_max": worst, "sample/staleness_mean": staleness}
    mismatch.observe(logs)
    return logs


def feed(rules: StopRules, steps: list[dict]):
    for n, logs in enumerate(steps, start=1):
        tripped = rules.observe(n, logs)
        if tripped:
            return tripped
    return None


def test_trls_kl_is_logged_as_the_mismatch_kl_and_nothing_is_made_up():
    logs = {"kl": 0.0123, "loss": 0.1}
    mismatch.observe(logs)
    assert logs == {"kl": 0.0123, "loss": 0.1, "mismatch/kl_mean": 0.0123}
    # TRL logs None (all NaN) or no `kl` for a window that trained no token: no figure, not a zero.
    for empty in ({"loss": 0.1}, {"kl": None}, {"kl": math.nan}, {"kl": True}):
        mismatch.observe(empty)
        assert "mismatch/kl_mean" not in empty


def test_default_stops_a_run_whose_engine_disagrees_for_the_whole_window_with_the_figures_and_fix():
    rules = from_env({})
    assert rules.thresholds["STOP_MISMATCH_KL"] == 0.02 and rules.window == 5
    # Wrong weights served from step 4 on: the window holds only such steps at step 8, and the rule stops there.
    tripped = feed(rules, [step(0.001)] * 3 + [step(0.25, worst=6.5, staleness=0.5)] * 10)
    assert tripped.rule.name == "STOP_MISMATCH_KL" and tripped.step == 8
    assert tripped.line == (
        "trainer: STOPPED by rule STOP_MISMATCH_KL at step 8: mean KL (nats) between the engine's and the "
        "trainer's logprobs of the trained tokens at or above 0.02 in each of the last 5 steps (0.25, 0.25, 0.25, "
        "0.25, 0.25; at step 8: max |logprob diff| 6.5, staleness 0.5). Checkpoint saved; fix: the engine does not "
        "score tokens as the trainer does: check that weight pushes land (weights/engine_version_lag on the "
        "dashboard), that the engine serves MODEL with ENGINE_DTYPE matching the trainer's compute (bfloat16 on "
        "the GPU) and processed logprobs (scripts/status: capture level); a KL that follows staleness is policy "
        "drift: lower MAX_STALENESS or LEARNING_RATE; then resume with RUN_NAME (or set STOP_MISMATCH_KL=off)"
    )
    assert tripped.as_status() == {
        "rule": "STOP_MISMATCH_KL",
        "metric": "mismatch/kl_mean",
        "step": 8,
        "mean": 0.25,
        "threshold": 0.02,
        "window": [0.25] * 5,
        "context": {"max |logprob diff|": 6.5, "staleness": 0.5},
        "message": tripped.line,
    }


def test_every_step_of_the_window_must_reach_the_bound_not_its_mean():
    rules = StopRules({"STOP_MISMATCH_KL": 0.02}, window=3)
    # One broken sample's spike (step 2) carries a 3-step mean over 0.02 but is not a disagreeing engine;
    # steps 4-6 all reach 0.02 (at, not only above, the threshold) and stop the run at step 6.
    tripped = feed(rules, [step(v) for v in (0.001, 0.5, 0.001, 0.02, 0.03, 0.02, 0.5)])
    assert tripped.step == 6 and tripped.window == (0.02, 0.03, 0.02)
    assert tripped.mean == pytest.approx(0.07 / 3)


def test_a_healthy_run_and_steps_without_trained_tokens_never_trip():
    # bf16 engine vs bf16-autocast trainer on a dense model: k3 1e-5..1e-3 (stop_rules' docstring), spikes included.
    assert feed(from_env({}), [step(0.003), step(0.003), step(0.003), step(0.3)] * 50) is None
    # Steps with no `kl` (nothing trained) neither count nor reset: 4 bad steps around gaps fill a window of 4.
    bad, gap = step(0.5), {"loss": 0.0}
    tripped = feed(StopRules({"STOP_MISMATCH_KL": 0.02}, window=4), [bad, gap, bad, gap, bad, gap, bad])
    assert tripped.step == 7 and tripped.window == (0.5, 0.5, 0.5, 0.5)


def test_a_kl_threshold_is_nats_not_a_fraction_and_off_disables_it():
    assert from_env({"STOP_MISMATCH_KL": "1.5"}).thresholds["STOP_MISMATCH_KL"] == 1.5  # above 1 is a KL too
    rules = from_env({"STOP_MISMATCH_KL": "off", "STOP_WINDOW_STEPS": "1"})
    assert "STOP_MISMATCH_KL" not in rules.thresholds and rules.observe(1, step(9.0)) is None


@pytest.mark.parametrize("raw", ["0", "-0.01", "nan", "inf", "2%", ""])
def test_a_bad_kl_threshold_is_one_line_naming_the_fix(raw):
    if raw == "":
        assert from_env({"STOP_MISMATCH_KL": raw}).thresholds["STOP_MISMATCH_KL"] == 0.02  # empty: the default
        return
    with pytest.raises(EnvError) as exc:
        from_env({"STOP_MISMATCH_KL": raw})
    assert str(exc.value) == (
        f"STOP_MISMATCH_KL={raw!r} must be a positive number of nats (default 0.02) or 'off': set it in .env, e.g. "
        "STOP_MISMATCH_KL=0.02 (the mean KL (nats) between the engine's and the trainer's logprobs of the trained "
        "tokens that stops the run when every step of the window reaches it), or STOP_MISMATCH_KL=off to disable "
        "the rule"
    )


def test_status_json_console_and_scripts_status_show_both_figures():
    fields = status_fields(step(0.00123, worst=0.3125, staleness=1.5))
    assert (fields["mismatch_kl"], fields["logprob_absdiff_max"], fields["staleness_mean"]) == (0.00123, 0.3125, 1.5)
    doc = {"step": 3, "max_steps": 10, **fields}
    assert "  mismatch kl 0.0012 max|dlogp| 0.31  ckpt -" in console_line(doc)
    assert "  mismatch kl - max|dlogp| -  " in console_line({"step": 0, "max_steps": 10})
    assert figures.mismatch(fields) == "mismatch KL 0.00123 nats, max |logprob diff| 0.312 at staleness 1.5"
    assert figures.mismatch({}) == "mismatch KL ? nats, max |logprob diff| ? at staleness ?"
    training = {"run_name": "r", "state": "training", "bucket": "/b", "run_dir": "/b/checkpoints/r", **doc}
    st = {
        "project": "p",
        "at": "now",
        "services": {},
        "tunnel": {"state": "none"},
        "engine": {"capture_level": "not running"},
        "env_server": {"error": "not running"},
        "training": training,
        "gpus": [],
    }
    lines = report.human(st).splitlines()
    forked = next(i for i, line in enumerate(lines) if "of turn transitions" in line)
    assert lines[forked + 1] == "            mismatch KL 0.00123 nats, max |logprob diff| 0.312 at staleness 1.5"
