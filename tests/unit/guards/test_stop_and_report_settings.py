"""Preflight refuses the stop-rule settings (STOP_*) and REPORT_TO=wandb without its key before anything is
paid for: one line each, naming the fix, the same line the trainer itself would stop with. Each triggered for
real through the whole guard pass."""

import pytest
from test_checks import GCSFUSE, good_env, probes_for

from guards.checks import run_all
from stack.env import EnvError
from stack.readers import reporting
from trainer.watch import stop_rules


def lines(env, tmp_path, phase="preflight"):
    found = run_all(env, probes_for(tmp_path, GCSFUSE), phase)
    return [(f.check, f.message) for f in found if f.check != "weight-transfer"]


@pytest.mark.parametrize(
    ("name", "value", "line"),
    [
        (
            "STOP_FORKING_FRAC",
            "50%",
            "STOP_FORKING_FRAC='50%' must be a fraction in (0, 1] (default 0.5) or 'off': set it in .env, e.g. "
            "STOP_FORKING_FRAC=0.5 (the share of turn transitions forked (re-rendered prompts) that stops the run), "
            "or STOP_FORKING_FRAC=off to disable the rule",
        ),
        (
            "STOP_UNSCORABLE_FRAC",
            "0",
            "STOP_UNSCORABLE_FRAC='0' must be a fraction in (0, 1] (default 0.9) or 'off': set it in .env, e.g. "
            "STOP_UNSCORABLE_FRAC=0.9 (the share of rollouts unscorable (sandbox or verifier failed) that stops the "
            "run), or STOP_UNSCORABLE_FRAC=off to disable the rule",
        ),
        (
            "STOP_ZERO_SPREAD_FRAC",
            "1.5",
            "STOP_ZERO_SPREAD_FRAC='1.5' must be a fraction in (0, 1] (default 1.0) or 'off': set it in .env, e.g. "
            "STOP_ZERO_SPREAD_FRAC=1.0 (the share of groups with zero reward spread (no gradient) that stops the "
            "run), or STOP_ZERO_SPREAD_FRAC=off to disable the rule",
        ),
        (
            # A KL, not a fraction: a value above 1 is fine, a percentage or 0 is not.
            "STOP_MISMATCH_KL",
            "2%",
            "STOP_MISMATCH_KL='2%' must be a positive number of nats (default 0.02) or 'off': set it in .env, e.g. "
            "STOP_MISMATCH_KL=0.02 (the mean KL (nats) between the engine's and the trainer's logprobs of the "
            "trained tokens that stops the run when every step of the window reaches it), or STOP_MISMATCH_KL=off "
            "to disable the rule",
        ),
        (
            "STOP_WINDOW_STEPS",
            "2.5",
            "STOP_WINDOW_STEPS='2.5' is not a whole number: set it in .env to a whole number of steps >= 1, e.g. "
            "STOP_WINDOW_STEPS=5 (the logged steps each rule averages over) (default 5)",
        ),
    ],
)
def test_each_bad_stop_rule_setting_is_one_line_naming_the_fix(tmp_path, name, value, line):
    for phase in ("preflight", "trainer"):
        assert lines(good_env(tmp_path, **{name: value}), tmp_path, phase) == [("stop-rules", line)]
    # The trainer stops with the same line (one reader, not two).
    with pytest.raises(EnvError) as err:
        stop_rules.from_env({name: value})
    assert str(err.value) == line


def test_every_bad_stop_rule_setting_is_listed_at_once_and_off_is_fine(tmp_path):
    env = good_env(tmp_path, STOP_FORKING_FRAC="x", STOP_UNSCORABLE_FRAC="2", STOP_WINDOW_STEPS="0")
    found = lines(env, tmp_path)
    assert [c for c, _ in found] == ["stop-rules"] * 3
    assert [m.split("=")[0] for _, m in found] == ["STOP_FORKING_FRAC", "STOP_UNSCORABLE_FRAC", "STOP_WINDOW_STEPS"]
    quiet = good_env(
        tmp_path,
        STOP_FORKING_FRAC="off",
        STOP_UNSCORABLE_FRAC="OFF",
        STOP_ZERO_SPREAD_FRAC="0.75",
        STOP_MISMATCH_KL="3",
    )
    assert lines(quiet, tmp_path) == []


WANDB_LINE = (
    "REPORT_TO=wandb needs WANDB_API_KEY: put it in .env (the trainer alone receives it), "
    "or use REPORT_TO=trackio for a dashboard on the bucket"
)


def test_wandb_without_its_key_is_one_line_naming_the_fix(tmp_path):
    # The trainer's environment (compose passes WANDB_API_KEY, empty when unset), and preflight's (only
    # WANDB_API_KEY_SET: ${WANDB_API_KEY:+set}, empty when unset).
    trainer = good_env(tmp_path, REPORT_TO="wandb", WANDB_API_KEY="")
    assert lines(trainer, tmp_path, "trainer") == [("report-to", WANDB_LINE)]
    preflight = good_env(tmp_path, REPORT_TO="wandb", WANDB_API_KEY_SET="")
    assert lines(preflight, tmp_path, "preflight") == [("report-to", WANDB_LINE)]
    # Told nothing about the key at all: this process cannot know; the trainer checks it.
    assert lines(good_env(tmp_path, REPORT_TO="wandb"), tmp_path) == []
    with pytest.raises(EnvError) as err:
        reporting.check("wandb", {})
    assert str(err.value) == WANDB_LINE


def test_wandb_with_its_key_or_preflight_told_the_key_is_set_passes(tmp_path):
    # The trainer holds the key itself; preflight is told only that it is set (WANDB_API_KEY_SET).
    assert lines(good_env(tmp_path, REPORT_TO="wandb", WANDB_API_KEY="k"), tmp_path, "trainer") == []
    assert lines(good_env(tmp_path, REPORT_TO="wandb", WANDB_API_KEY_SET="set"), tmp_path) == []
    assert lines(good_env(tmp_path, REPORT_TO="wandb", WANDB_API_KEY="  "), tmp_path) == [("report-to", WANDB_LINE)]
    # Other backends need no key.
    assert lines(good_env(tmp_path, REPORT_TO="tensorboard"), tmp_path) == []
