"""The rollout child spawned early (worker.HarborRolloutWorker.prestart) through TRL 1.16.0's own worker:
it starts no rollout until TRL's `start()` (called after the cold weight sync), then starts at the
position TRL set on resume, and a run stopped before training releases it without a rollout.

The worker, its spawned child and TRL's loop are real; the session factory records which task each
rollout asked for and fails it (a rollout's outcome is not what is tested here). Runs in the trainer image:
tests/run-in-image trainer tests/integration/trainer
"""

import subprocess
import sys
import time
from pathlib import Path

import pytest

from trainer.rollouts.factory import prompt_row, task_ref_from_prompt
from trainer.rollouts.worker import HarborRolloutWorker
from trainer.train import _loop_owning_tokenizer

TASKS = ["count-lines", "sum-numbers", "write-greeting", "fix-typo"]


class RecordingFactory:
    """Module-level and picklable: TRL's child unpickles it. Appends each rollout's task index to a file."""

    def __init__(self, record: str, sampling=None):
        self.record = record

    def create(self, prompt, seed, episode_id):
        with open(self.record, "a") as f:
            f.write(f"{task_ref_from_prompt(prompt).index}\n")
        time.sleep(0.2)
        raise RuntimeError("recorded; this test scores no rollout")


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from transformers import AutoTokenizer

    model_dir = Path("/app/models/tiny-agent")
    if not (model_dir / "config.json").is_file():
        model_dir = tmp_path_factory.mktemp("model") / "tiny-agent"
        subprocess.run([sys.executable, "-m", "mock_engine.build_model", str(model_dir)], check=True, timeout=300)
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    return str(model_dir), _loop_owning_tokenizer(tok)


def make_worker(tokenizer, record: Path) -> HarborRolloutWorker:
    import functools

    from datasets import Dataset

    model, tok = tokenizer
    rows = [prompt_row("local", i, f"Task {name}.", name) for i, name in enumerate(TASKS)]
    return HarborRolloutWorker(
        cpu_form=True,
        harness_session_factory=functools.partial(RecordingFactory, str(record)),
        model_name=model,
        dataset=Dataset.from_list(rows),
        reward_funcs=[],
        processing_class=tok,
        eos_token_ids=[tok.eos_token_id],
        num_generations=1,
        max_inflight_tasks=1,  # one rollout at a time: the first recorded is the first started
        vllm_server_url="http://127.0.0.1:9",
        max_tokens=16,
    )


def wait_for(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.1)


def recorded(record: Path) -> list[int]:
    return [int(line) for line in record.read_text().split()] if record.exists() else []


def test_the_early_child_waits_for_start_then_starts_at_the_resume_position(tokenizer, tmp_path):
    record = tmp_path / "record"
    worker = make_worker(tokenizer, record)
    try:
        worker.prestart()
        gate_folder = Path(worker._gate.path).parent
        wait_for(worker._child_ready_event.is_set, 240, "the child's ready signal (it imports TRL first)")
        time.sleep(2.0)
        assert recorded(record) == []  # ready, held at the gate: no rollout before TRL's start()
        # What TRL 1.16.0's _inner_training_loop does on resume, after the child was spawned.
        worker._loop_kwargs["dataset_start_index"] = 2
        worker.start()
        wait_for(lambda: len(recorded(record)) >= 3, 60, "three rollouts after start()")
        assert recorded(record)[:3] == [2, 3, 0], recorded(record)
        worker.check_health(stale_after_s=60)  # the heartbeat is the child's, not the spawn's
    finally:
        worker.stop()
    assert worker._process is None
    assert not gate_folder.exists()  # the gate's folder goes with the worker's stop
    worker.stop()  # train.py stops it again after TRL did: nothing left to do, nothing raised


def test_a_run_stopped_before_training_releases_the_early_child_without_a_rollout(tokenizer, tmp_path):
    record = tmp_path / "record"
    worker = make_worker(tokenizer, record)
    worker.prestart()
    gate_folder = Path(worker._gate.path).parent
    wait_for(worker._child_ready_event.is_set, 240, "the child's ready signal")
    process = worker._process
    t0 = time.monotonic()
    worker.stop()  # what train.py's finally does when the warm-up failed
    assert not process.is_alive() and process.exitcode == 0, process.exitcode  # it left; not terminated
    assert time.monotonic() - t0 < 10
    assert recorded(record) == []
    assert not gate_folder.exists()
