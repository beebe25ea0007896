"""The learning gate's verdict lines (tests/learning/verdict.py) on eval documents built by the trainer's own
pass@1 (trainer.evaluation.passk), and `benchmarks/learning_stack.py --help`, which must start nothing (issue 37: it started
both ~70 min runs)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from learning.verdict import gate_failures, held_out_failure

from trainer.evaluation.passk import suite_pass_at_k

ROOT = Path(__file__).resolve().parents[3]
BENCH = ROOT / "benchmarks" / "learning_stack.py"
GOOD_REWARDS = {13: 0.9, 14: 1.0, 15: 0.8}


def eval_doc(passes: int, attempts: int = 48) -> dict:
    # One task per attempt pair, as trainer.evaluation.evaluate scores the 24 held-out tasks x 2.
    per_task = [(2, min(2, max(0, passes - 2 * i))) for i in range(attempts // 2)]
    return {"pass_at_k": {"1": suite_pass_at_k(per_task, 1)}}


def test_a_rise_whose_intervals_clear_the_baseline_passes():
    # 13/48 -> 43/48, the first full run's figures (27.1% -> 89.6%).
    assert gate_failures(eval_doc(13), eval_doc(43), GOOD_REWARDS) == []


def test_overlapping_intervals_say_they_overlap():
    # The control's figures: 16/48 -> 12/48 (33.3% -> 25.0%).
    assert held_out_failure(eval_doc(16), eval_doc(12)) == (
        "held-out pass@1 0.250 [0.149, 0.388] after training does not clear the baseline 0.333 [0.217, 0.475] "
        "(95% Wilson intervals overlap)"
    )


def test_a_policy_that_got_worse_is_named_and_not_called_an_overlap():
    # 27.1% -> 0.0% [0.0%, 7.4%]: the final interval lies wholly below the baseline's.
    line = held_out_failure(eval_doc(13), eval_doc(0))
    assert line == (
        "held-out pass@1 0.000 [0.000, 0.074] after training is below the baseline 0.271 [0.166, 0.410]: "
        "the policy got worse (95% Wilson intervals do not overlap)"
    )
    assert gate_failures(eval_doc(13), eval_doc(0), GOOD_REWARDS) == [line]


def test_a_small_rise_inside_the_baseline_interval_is_an_overlap():
    line = held_out_failure(eval_doc(13), eval_doc(20))
    assert line is not None and line.endswith("(95% Wilson intervals overlap)")


def test_the_reward_bar_still_fails_on_its_own():
    assert gate_failures(eval_doc(13), eval_doc(43), {13: 0.2, 14: 0.3, 15: 0.1}) == [
        "mean reward of the last 3 steps 0.200 < 0.7 ([0.2, 0.3, 0.1])"
    ]


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_learning_stack_help_prints_usage_and_runs_nothing(flag, monkeypatch, capsys):
    spec = importlib.util.spec_from_file_location("learning_stack", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    started = []
    monkeypatch.setattr(module.subprocess, "run", lambda *a, **k: started.append(a) or pytest.fail("ran"))
    with pytest.raises(SystemExit) as stop:
        module.main([flag])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: benchmarks/learning_stack.py")
    assert "LEARNING_GATE_CONTROL=1" in out
    assert started == []


def test_learning_stack_refuses_an_unknown_argument_in_one_line():
    out = subprocess.run([sys.executable, str(BENCH), "--steps", "3"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert out.stdout == ""
    assert out.stderr.splitlines()[-1] == "benchmarks/learning_stack.py: error: unrecognized arguments: --steps 3"
