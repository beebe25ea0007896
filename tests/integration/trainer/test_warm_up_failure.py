"""A failed warm-up rollout stops the run before the model is loaded: one line naming the fix, and status.json
says `failed` with that line (what `docker compose ps`'s healthcheck and scripts/status read).

The tokenizer and the rollout child are prepared while the warm-up runs (train._train); MODEL here names
nothing, so that preparation fails too, and the warm-up's line must still be the one reported.

The real trainer entry (`trainer.train.run`, its settings reader, RunStatus, the warm-up, OpenEnv's result
model and training contract); the env server is a runner that hands back the rollout result an env server
returns for a sandbox that failed, or for an engine started without token ids. Runs in the trainer image
(torch, TRL are imported before the warm-up): tests/run-in-image trainer tests/integration/trainer
"""

import json
import os
from unittest import mock

import huggingface_hub.constants
import pytest
from openenv.harbor.models import HarborRolloutResult, HarborTurn

from stack.readers.trainer import from_env
from trainer.rollouts.factory import prompt_row
from trainer.train import run
from trainer.watch import healthcheck
from trainer.watch.stop_rules import from_env as stop_rules_from_env


class OneResult:
    """The env server's side of the warm-up: a task list and one rollout result."""

    def __init__(self, result: HarborRolloutResult):
        self.result = result
        self.rollouts = 0

    def task_rows(self):
        return [prompt_row("starter", 0, "Count the lines.", "count-lines")]

    def run(self, ref, sampling, episode_id):
        self.rollouts += 1
        return self.result


def start(tmp_path, result):
    env = {
        "MODEL": "not-loaded/before-the-warm-up",
        "BUCKET_DIR": str(tmp_path / "bucket"),
        "RUN_NAME": "warm-up-test",
        "REPORT_TO": "none",
        "WEIGHT_TRANSFER": "mock",
        "SANDBOX": "docker",
        # The runner's one split: the trainer trains on DATASETS' splits only.
        "DATASETS": "starter",
    }
    runner = OneResult(result)
    # run() sets the dashboards' folders in os.environ (reporting.prepare): put back what was there.
    # Offline, so the tokenizer of a model that is nowhere fails at once (the Hub client reads
    # HF_HUB_OFFLINE at import, hence the constant; online it retries for 46 s on a machine without DNS).
    with mock.patch.dict(os.environ, env), mock.patch.object(huggingface_hub.constants, "HF_HUB_OFFLINE", True):
        settings = from_env(env)
        with pytest.raises(BaseException) as err:
            run(settings, runner=runner, rules=stop_rules_from_env(env))
    status = json.loads((tmp_path / "bucket" / "checkpoints" / "warm-up-test" / "status.json").read_text())
    assert runner.rollouts == 1
    return err.value, status


def test_a_sandbox_that_failed_stops_the_run_with_one_line_and_status_failed(tmp_path):
    failed = HarborRolloutResult(
        ok=False,
        task_name="count-lines",
        trial_name="count-lines__a1b2",
        exception_type="DockerBuildError",
        error="docker compose build failed: pull access denied for python:3.12-slim\n",
    )
    err, status = start(tmp_path, failed)
    line = (
        "trainer: the warm-up rollout failed (unscorable rollout count-lines__a1b2 (count-lines): DockerBuildError: "
        "docker compose build failed: pull access denied for python:3.12-slim). Fix the sandbox/env server (see the "
        "env-server logs) before paying for training"
    )
    assert isinstance(err, SystemExit) and str(err) == line
    assert (status["state"], status["error"], status["step"]) == ("failed", f"SystemExit: {line}", 0), status
    # What the trainer container's healthcheck prints (docker compose ps / inspect).
    assert healthcheck.check(status, now=0, stale_after_s=600) == (
        False,
        f"trainer failed at step 0/200: SystemExit: {line}",
    )


def test_an_engine_without_token_ids_stops_the_run_naming_the_vllm_flags(tmp_path):
    no_prompt_ids = HarborRolloutResult(
        ok=True,
        reward=1.0,
        task_name="count-lines",
        trial_name="count-lines__c3d4",
        turns=[HarborTurn(turn=0, completion_token_ids=[5, 6], per_token_logps=[-0.1, -0.2])],
    )
    err, status = start(tmp_path, no_prompt_ids)
    line = (
        "rollout count-lines__c3d4 (count-lines): captured turn 0 has no prompt_token_ids, so it cannot be trained "
        "without re-rendering the prompt (which forks and corrupts training). Start vLLM with "
        "--return-tokens-as-token-ids and --logprobs-mode processed_logprobs"
    )
    assert isinstance(err, ValueError) and str(err) == line
    assert (status["state"], status["error"]) == ("failed", f"ValueError: {line}"), status
