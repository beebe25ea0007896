"""The trainer's healthcheck over status documents, and the command itself against a status file."""

import calendar
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trainer.watch.healthcheck import announce, check

ROOT = Path(__file__).resolve().parents[3]
NOW = calendar.timegm((2026, 11, 29, 23, 0, 0))


def doc(state: str, age_s: float, **extra) -> dict:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(NOW - age_s))
    return {"state": state, "step": 3, "max_steps": 10, "updated_at": stamp, **extra}


@pytest.mark.parametrize("state", ["starting", "warming-up", "training"])
def test_a_live_run_is_healthy_while_its_status_is_fresh(state):
    assert check(doc(state, 60), NOW, 1800) == (True, f"trainer {state} at step 3/10, status written 60 s ago")


def test_a_training_run_whose_status_went_stale_is_unhealthy_and_says_so():
    healthy, line = check(doc("training", 1801), NOW, 1800)
    assert not healthy
    assert line == (
        "trainer training at step 3/10 but its status was last written 1801 s ago (> TRAINER_STALE_S=1800): "
        "no step is finishing; rollouts may be refused (scripts/status says why)"
    )


def test_finished_stays_healthy_however_old():
    assert check(doc("finished", 10_000), NOW, 1800)[0]


def test_a_rule_stop_or_a_failure_is_unhealthy_with_its_message():
    stopped = doc("stopped-by-rule", 5, stop_rule={"message": "trainer: STOPPED by rule STOP_FORKING_FRAC ..."})
    assert check(stopped, NOW, 1800) == (
        False,
        "trainer stopped-by-rule at step 3/10: trainer: STOPPED by rule STOP_FORKING_FRAC ...",
    )
    assert check(doc("failed", 5, error="RuntimeError: boom"), NOW, 1800) == (
        False,
        "trainer failed at step 3/10: RuntimeError: boom",
    )
    # Waiting on refused rollouts is what "running but not training" looked like: unhealthy, with the reason.
    waiting = doc("waiting-for-rollouts", 5, reason="env server refuses rollouts: tunnel not verified")
    assert check(waiting, NOW, 1800) == (
        False,
        "trainer waiting-for-rollouts at step 3/10: env server refuses rollouts: tunnel not verified",
    )
    # A state another part of the trainer adds later is not taken for health.
    assert check(doc("backing off", 5), NOW, 1800)[0] is False


def run_check(pointer: Path, **env) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "trainer.watch.healthcheck"],
        env={"PYTHONPATH": str(ROOT / "services"), "TRAINER_STATUS_POINTER": str(pointer), **env},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_the_command_follows_the_announced_status_file(tmp_path):
    pointer = tmp_path / "pointer"
    out = run_check(pointer)
    assert (out.returncode, out.stdout.strip()) == (1, "trainer has not started a run yet (guards or model loading)")
    status = tmp_path / "run" / "status.json"
    announce(status, pointer)
    status.parent.mkdir()
    fresh = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    status.write_text(json.dumps({"state": "training", "step": 1, "max_steps": 2, "updated_at": fresh}))
    out = run_check(pointer)
    assert out.returncode == 0 and out.stdout.startswith("trainer training at step 1/2"), out.stdout
    out = run_check(pointer, TRAINER_STALE_S="-1")
    assert out.returncode == 1 and out.stdout.startswith("TRAINER_STALE_S='-1' is not above 0"), out.stdout
