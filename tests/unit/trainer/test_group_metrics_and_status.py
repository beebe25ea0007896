"""The `harbor/*` figures the stop rules and status.json read, from known inputs, and status.json's key mapping.

The rates dict is shaped like TRL 1.16.0's worker `_rates` (defaultdict of [num, den], logged as num/den per
window); the functions are the ones trainer/rollouts/worker.py calls inside TRL's loop. TRL itself is not on the host:
tests/integration/trainer drives the real worker end to end.
"""

import json
import math
import time
from collections import defaultdict

from trainer.rollouts import group_metrics
from trainer.watch.status import METRICS, RunStatus, console_line, status_fields


def window(rates):
    return {key: num / den for key, (num, den) in rates.items()}


def fresh():
    return defaultdict(lambda: [0.0, 0.0])


def test_a_re_rendered_rollout_is_forked_and_an_extending_one_is_not():
    rates = fresh()
    # Two-turn and three-turn rollouts whose every turn re-rendered its conversation start train one row
    # per turn.
    group_metrics.add_rollout(rates, sequences=2, loop_exhausted=False)
    group_metrics.add_rollout(rates, sequences=3, loop_exhausted=False)
    assert window(rates) == {"harbor/forked_rollout_frac": 1.0, "harbor/timeout_frac": 0.0}
    # Two rollouts whose prompts extend the last reply are one row each, forked or not by turn count.
    group_metrics.add_rollout(rates, sequences=1, loop_exhausted=True)
    group_metrics.add_rollout(rates, sequences=1, loop_exhausted=False)
    assert window(rates) == {"harbor/forked_rollout_frac": 0.5, "harbor/timeout_frac": 0.25}


# TRL 1.16.0's `_chain_to_sequences` tally for a 3-turn rollout (2 transitions), as it hands it to
# `_push_rollout_metrics` beside the row count.
RE_RENDERED_TALLY = {
    "clean": 0.0,
    "realign": 0.0,
    "fork": 2.0,
    "transitions": 2.0,
    "drift_tokens": 9.0,
    "drift_max": 5.0,
}
CHAINED_TALLY = {"clean": 2.0, "realign": 0.0, "fork": 0.0, "transitions": 2.0, "drift_tokens": 0.0, "drift_max": 0.0}


def test_a_re_rendered_rollout_is_forked_even_when_trl_returns_one_row():
    """Every transition forked, but TRL keeps only rows holding a trained token: with the earlier branches
    masked, it returns ONE row. Counting rows read 0.0 here (the bug); the tally reads 1.0."""
    rates = fresh()
    group_metrics.add_rollout(rates, sequences=1, loop_exhausted=False, tally=RE_RENDERED_TALLY)
    # A multi-turn rollout: it also counts toward the retry share (it made none; trainer/rollouts/retries.py).
    assert window(rates) == {
        "harbor/forked_rollout_frac": 1.0,
        "harbor/timeout_frac": 0.0,
        "rollout/retry_frac": 0.0,
    }
    group_metrics.add_rollout(rates, sequences=3, loop_exhausted=False, tally=RE_RENDERED_TALLY)
    assert window(rates)["harbor/forked_rollout_frac"] == 1.0
    # A chained 3-turn rollout (one row, clean transitions) and a single-turn one did not fork.
    group_metrics.add_rollout(rates, sequences=1, loop_exhausted=False, tally=CHAINED_TALLY)
    group_metrics.add_rollout(rates, sequences=1, loop_exhausted=False, tally={"fork": 0.0, "transitions": 0.0})
    assert window(rates)["harbor/forked_rollout_frac"] == 0.5


def test_one_unscorable_rollout_in_a_group_of_three():
    rates = fresh()
    group_metrics.add_group(rates, [1.0, None, 0.0], [2, 0, 4])
    assert window(rates) == {
        "harbor/unscorable_frac": 1 / 3,
        "harbor/tool_calls_mean": 2.0,
        "harbor/reward_mean": 0.5,
        "harbor/reward_std": 0.5,
        "harbor/zero_spread_frac": 0.0,
    }


def test_groups_without_spread():
    rates = fresh()
    group_metrics.add_group(rates, [1.0, 1.0], [1, 1])  # same reward: zero advantage
    group_metrics.add_group(rates, [None, 0.0], [0, 1])  # one scored rollout: nothing to compare with
    group_metrics.add_group(rates, [None, None], [0, 0])  # nothing scored: no reward figures at all
    group_metrics.add_group(rates, [0.0, 1.0], [3, 3])
    w = window(rates)
    assert w["harbor/zero_spread_frac"] == 3 / 4
    assert w["harbor/unscorable_frac"] == 3 / 8
    assert w["harbor/reward_mean"] == 3 / 5  # over the 5 scored rollouts only
    assert w["harbor/reward_std"] == 0.5 / 3  # averaged over the 3 groups that had a scored rollout
    assert w["harbor/tool_calls_mean"] == 9 / 8


def test_status_fields_map_every_metric_and_only_those_logged():
    logs = {key: i / 10 for i, key in enumerate(METRICS.values())}
    fields = status_fields({**logs, "loss": 0.3, "rollout/realign_frac": 0.0})
    assert fields == {name: i / 10 for i, name in enumerate(METRICS)}
    assert fields["forked_rollout_frac"] == logs["harbor/forked_rollout_frac"]
    assert fields["fork_frac"] == logs["rollout/fork_frac"]
    # A window with no multi-turn rollout logs no fork figure: the field is left alone, not blanked.
    assert status_fields({"harbor/reward_mean": 0.25}) == {"reward_mean": 0.25}
    assert status_fields({"harbor/reward_std": math.nan, "rollout/fork_frac": "1"}) == {
        "reward_std": None,
        "fork_frac": None,
    }
    assert status_fields({"perf/step_s": 3}) == {"step_s": 3.0}


def test_run_status_writes_the_documented_file(tmp_path):
    path = tmp_path / "checkpoints" / "run" / "status.json"
    status = RunStatus(path, "run", max_steps=2)
    status.update(state="training", step=1, **status_fields({"harbor/reward_mean": 1.0, "rollout/fork_frac": 0.0}))
    doc = json.loads(path.read_text())
    assert doc["run_name"] == "run" and doc["state"] == "training" and (doc["step"], doc["max_steps"]) == (1, 2)
    assert (doc["reward_mean"], doc["fork_frac"], doc["forked_rollout_frac"]) == (1.0, 0.0, None)
    assert set(METRICS) <= set(doc) and doc["last_checkpoint"] is None and doc["error"] is None
    assert [p.name for p in path.parent.iterdir()] == ["status.json"]  # no temporary file left behind
    assert console_line(doc).startswith(
        "step 1/2  reward 1.000±-  zero-spread -  turns -  samples/rollout - (forked -)"
    )


def test_first_step_line_and_fields_measure_from_the_process_start():
    from trainer.watch.status import first_step, process_started_at

    # /proc/self/stat field 22 (start time, clock ticks after boot); a command with spaces and ')' in it.
    stat = "4242 (python (x) y) S 1 4242 4242 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 12345 1000 10"
    assert process_started_at(stat, "cpu 1 2 3\nbtime 1800000000\nprocesses 9\n", ticks=100) == 1800000123.45
    # Unreadable /proc: the module's import time, never a crash.
    assert process_started_at("garbage", "", ticks=100) > 0
    fields, line = first_step(1800000000.0, 1800000187.4, 1)
    assert fields == {"first_step_at": 1800000187.4, "first_step_after_s": 187.4}
    assert line == "trainer: first training step done 187 s after start (step 1)"
    assert abs(process_started_at() - time.time()) < 3600  # this very process, on this host
