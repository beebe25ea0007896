"""Evaluation, screening and training-task selection over a scripted runner.

The runner is a test double for the env server (which needs Docker sandboxes; the in-image integration
test tests/integration/trainer/test_eval_screen_publish.py runs the real capture proxy): it returns
OpenEnv's own `HarborRolloutResult` with a fixed reward sequence per task.
"""

import json
import threading

import pytest
from openenv.harbor.models import HarborRolloutResult

from trainer.evaluation.evaluate import comparison_table, run_attempts, select_tasks, summarize
from trainer.evaluation.screen import markdown as screen_markdown
from trainer.evaluation.screen import screen
from trainer.rollouts.factory import prompt_row
from trainer.rollouts.task_select import TaskSelectionError, training_rows

ROWS = [prompt_row("train", i, f"task {i}", f"t{i}") for i in range(5)] + [
    prompt_row("held", i, f"held {i}", f"h{i}") for i in range(2)
]


class ScriptedRunner:
    """rewards[task_id] is consumed one attempt at a time; "boom" raises, None is unscorable."""

    def __init__(self, rewards):
        self.rewards = {k: list(v) for k, v in rewards.items()}
        self.calls = []
        self.lock = threading.Lock()

    def evaluate(self, ref, eval_sampling):
        with self.lock:
            self.calls.append((ref.split, ref.index, dict(eval_sampling)))
            value = self.rewards[f"{ref.split[0]}{ref.index}"].pop(0)
        if value == "boom":
            raise ConnectionError("env server went away")
        return HarborRolloutResult(
            reward=value, rollout_type="eval", exception_type=None if value is not None else "VerifierError"
        )


def test_select_tasks_refuses_unknown_or_missing_splits():
    assert [ref.index for ref, _ in select_tasks(ROWS, ["held"])] == [0, 1]
    assert len(select_tasks(ROWS, ["train"], max_tasks=3)) == 3
    with pytest.raises(ValueError, match="set EVAL_DATASETS"):
        select_tasks(ROWS, [])
    with pytest.raises(ValueError, match=r"\['nope'\] are not served"):
        select_tasks(ROWS, ["nope"])


def test_evaluation_counts_unscorable_apart_and_sends_eval_sampling():
    runner = ScriptedRunner({"h0": [1.0, 0.0], "h1": [None, "boom"]})
    attempts = run_attempts(runner, select_tasks(ROWS, ["held"]), 2, {"temperature": 0.6, "top_p": 0.95}, 3)
    assert {c[2]["temperature"] for c in runner.calls} == {0.6}
    doc = summarize(attempts, [1, 2], label="base", splits=["held"], held_out=True)
    assert (doc["tasks"], doc["attempts"], doc["scored_attempts"], doc["unscorable"]) == (2, 4, 2, 2)
    assert doc["pass_at_k"]["1"]["value"] == 0.5  # 1 pass of 2 SCORED attempts: unscorable is not a failure
    assert doc["pass_at_k"]["2"]["value"] == 1.0 and doc["pass_at_k"]["2"]["tasks_skipped"] == 1
    h1 = next(r for r in doc["per_task"] if r["index"] == 1)
    assert h1["scored"] == 0 and h1["pass_rate"] is None
    assert any("env server went away" in e for e in h1["errors"])
    table = comparison_table([doc])
    assert "| base | held | 2 | 2 / 4 | 50.0% [9.5%, 90.5%] | 100.0% [100.0%, 100.0%] |" in table


def test_screening_keeps_only_tasks_solved_sometimes():
    runner = ScriptedRunner(
        {
            "t0": [1.0, 0.0, 1.0, 0.0],  # keep
            "t1": [0.0, 0.0, 0.0, 0.0],  # never
            "t2": [1.0, 1.0, 1.0, 1.0],  # always
            "t3": [None, None, None, None],  # unscorable
            "t4": [None, 1.0, 1.0, "boom"],  # always, among the scored ones
        }
    )
    attempts = run_attempts(runner, select_tasks(ROWS, ["train"]), 4, {"temperature": 1.0}, 2)
    doc = screen(attempts, model="m", attempts_per_task=4, sampling={"temperature": 1.0})
    verdicts = {r["task_id"]: r["verdict"] for r in doc["per_task"]}
    assert verdicts == {
        "t0": "keep",
        "t1": "drop: never solved",
        "t2": "drop: always solved",
        "t3": "drop: unscorable",
        "t4": "drop: always solved",
    }
    assert doc["keep"] == [{"split": "train", "index": 0, "task_id": "t0"}]
    assert "| t0 | train | 2 / 4 | 50.0% | 0 | keep |" in screen_markdown(doc)


def test_training_rows_exclude_eval_only_splits_and_follow_screening(tmp_path):
    assert {r["task_id"] for r in training_rows(ROWS, ["train"])} == {f"t{i}" for i in range(5)}
    assert len(training_rows(ROWS, ())) == 7  # no DATASETS given: whatever is served
    with pytest.raises(TaskSelectionError, match="DATASETS=elsewhere"):
        training_rows(ROWS, ["elsewhere"])
    screened = tmp_path / "screened-tasks.json"
    screened.write_text(json.dumps({"keep": [{"split": "train", "index": 3, "task_id": "t3"}]}))
    assert [r["task_id"] for r in training_rows(ROWS, ["train"], str(screened))] == ["t3"]
    # The dataset changed since screening (index 3 is another task now): refuse, never train the wrong task.
    screened.write_text(json.dumps({"keep": [{"split": "train", "index": 3, "task_id": "renamed"}]}))
    with pytest.raises(TaskSelectionError, match="re-run scripts/screen"):
        training_rows(ROWS, ["train"], str(screened))
    screened.write_text("not json")
    with pytest.raises(TaskSelectionError, match="is not a screening result"):
        training_rows(ROWS, ["train"], str(screened))
