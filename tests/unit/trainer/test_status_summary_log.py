"""status.json through the Trainer's end-of-training summary log (trainer/watch/summary_log.py).

StatusCallback.on_log (trainer/watch/status_callback.py, needs transformers) is `status.update(step=state.global_step,
**status_fields(logs))`; this feeds the same calls with the logs TRL 1.16.0 hands it at the end of a run.
"""

from __future__ import annotations

import json

from trainer.watch.status import RunStatus, status_fields


def on_log(status: RunStatus, step: int, logs: dict) -> dict:
    status.update(step=step, **status_fields(logs))
    return json.loads(status.path.read_text())


def test_the_summary_log_keeps_the_last_steps_figures_and_updates_the_run_totals(tmp_path):
    status = RunStatus(tmp_path / "status.json", "run", max_steps=2)
    step = {
        "loss": 0.01,
        "harbor/reward_mean": 0.79,
        "harbor/reward_std": 0.25,
        "harbor/zero_spread_frac": 0.5,
        "perf/step_s": 12.5,
        "batch/dropped_oversize_cumulative": 1,
    }
    on_log(status, 2, step)
    # transformers' summary at the same step; TRL's log() drained the rollout worker's queue into it: the groups
    # that finished after the last optimizer step, never trained on. DroppedSampleCounter wrote its run total.
    summary = {
        "train_runtime": 81.5,
        "train_loss": 0.02,
        "harbor/reward_mean": 0.99,
        "harbor/reward_std": 0.05,
        "harbor/zero_spread_frac": 0.0,
        "perf/step_s": 0.5,
        "batch/dropped_oversize_cumulative": 3,
    }
    doc = on_log(status, 2, summary)
    assert doc["step"] == 2
    assert (doc["reward_mean"], doc["reward_std"], doc["zero_spread_frac"], doc["step_s"]) == (0.79, 0.25, 0.5, 12.5)
    assert doc["dropped_oversize_total"] == 3.0  # every drop of the run, the summary window's included


def test_a_summary_log_sets_nothing_but_the_run_totals():
    assert status_fields({"train_runtime": 81.5, "harbor/reward_mean": 0.99, "rollout/fork_frac": 1.0}) == {}
    summary = {"train_runtime": 81.5, "batch/dropped_oversize_cumulative": 2, "sample/dropped_stale_frac": 0.5}
    assert status_fields(summary) == {"dropped_oversize_total": 2.0}
