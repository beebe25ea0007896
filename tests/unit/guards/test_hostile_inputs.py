"""Preflight against what an operator's messy night feeds it beyond single settings (issue 40): a dataset with a
broken task, names that would leave their folder or land on a file, a run whose every checkpoint is broken, and
pairs of settings that each pass alone and contradict each other. Each is one line that names the fix."""

import json
import shutil
from pathlib import Path

import pytest
from test_checks import GCSFUSE, good_env, probes_for

from guards.checks import run_all

STARTER = Path(__file__).resolve().parents[3] / "datasets" / "starter"


def lines(env, tmp_path, phase="preflight"):
    return [
        (f.check, f.message) for f in run_all(env, probes_for(tmp_path, GCSFUSE), phase) if f.check != "weight-transfer"
    ]


def test_a_broken_task_in_a_dataset_preflight_can_see(tmp_path):
    ds = tmp_path / "ds"
    shutil.copytree(STARTER, ds)
    shutil.rmtree(ds / "sum-numbers" / "tests")
    assert lines(good_env(tmp_path, DATASETS=str(ds)), tmp_path) == [
        (
            "datasets",
            f"DATASETS {str(ds)!r} task 'sum-numbers': tests/test.sh is missing, so nothing can score it: add the "
            "task's verifier script at tests/test.sh (or set DATASET_BAD_TASKS=skip to serve the others)",
        )
    ]
    # Skipping is the operator's word: env-server serves the others and counts what it left out.
    assert lines(good_env(tmp_path, DATASETS=str(ds), DATASET_BAD_TASKS="skip"), tmp_path) == []


def test_a_dataset_only_env_server_mounts_is_left_to_env_server(tmp_path):
    assert lines(good_env(tmp_path, DATASETS="/app/datasets/starter,some/hub-id"), tmp_path) == []


def test_a_run_name_that_lands_on_a_file(tmp_path):
    env = good_env(tmp_path, RUN_NAME="my-run")
    (tmp_path / "bucket" / "checkpoints").mkdir()
    (tmp_path / "bucket" / "checkpoints" / "my-run").write_text("not a folder")
    assert lines(env, tmp_path) == [
        (
            "trainer-settings",
            f"RUN_NAME='my-run' names {tmp_path}/bucket/checkpoints/my-run, which is a file, not a folder: choose "
            "another name or move that file",
        )
    ]


def test_a_stack_name_that_leaves_its_folder(tmp_path):
    assert lines(good_env(tmp_path, STACK_NAME="../x"), tmp_path) == [
        (
            "env-server-settings",
            "STACK_NAME='../x' is not a usable folder name: use letters, digits, '.', '_' and '-', starting with a "
            "letter or digit, at most 128 characters (no '/', no '..'), or leave it empty",
        )
    ]


def test_every_checkpoint_broken_is_refused_before_the_engine_loads(tmp_path):
    ckpt = tmp_path / "bucket" / "checkpoints" / "night-1" / "checkpoint-20"
    ckpt.mkdir(parents=True)
    (ckpt / "trainer_state.json").write_text('{"global_step": 20')
    found = lines(good_env(tmp_path, RUN_NAME="night-1"), tmp_path)
    assert found == [
        (
            "resume",
            "RUN_NAME=night-1 cannot resume: its newest checkpoint checkpoint-20 is broken, its trainer_state.json "
            "does not parse (JSONDecodeError: Expecting ',' delimiter: line 1 column 19 (char 18)), and starting it "
            f"from step 0 would lose its position: restore a checkpoint into {ckpt.parent}, or start a fresh run "
            "(leave RUN_NAME empty)",
        )
    ]


def test_a_broken_newest_checkpoint_with_an_older_one_that_loads_passes(tmp_path):
    run = tmp_path / "bucket" / "checkpoints" / "night-1"
    good = run / "checkpoint-10"
    good.mkdir(parents=True)
    header = json.dumps({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
    (good / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header + b"\0" * 4)
    (good / "trainer_state.json").write_text('{"global_step": 10}')
    (run / "checkpoint-20").mkdir()
    assert lines(good_env(tmp_path, RUN_NAME="night-1"), tmp_path) == []


@pytest.mark.parametrize(
    ("over", "check", "line"),
    [
        (
            {"MAX_INFLIGHT_ROLLOUTS": "100", "MAX_CONCURRENT_ENVS": "100"},
            "env-server-settings",
            "MAX_INFLIGHT_ROLLOUTS=100 is above CAPTURE_MAX_CONCURRENT=64, the model calls the capture proxy admits "
            "at once, so the surplus rollouts would wait on 429s holding their sandboxes: raise CAPTURE_MAX_CONCURRENT "
            "to at least 100, or lower MAX_INFLIGHT_ROLLOUTS",
        ),
        (
            {"MAX_STEPS": "100", "SAVE_STEPS": "200"},
            "trainer-settings",
            "SAVE_STEPS=200 is longer than the run (MAX_STEPS=100), so no checkpoint would be saved before its end and "
            "a crash would lose every step: set SAVE_STEPS to at most 100",
        ),
        (
            {"HUB_PUSH_CHECKPOINTS": "1"},
            "trainer-settings",
            "HUB_PUSH_CHECKPOINTS=1 but HUB_MODEL_ID is empty, so there is no repository to push them to: set "
            "HUB_MODEL_ID (e.g. your-name/qwen3-harbor-grpo), or HUB_PUSH_CHECKPOINTS=0",
        ),
        (
            {"ENGINE_GPUS": "0", "ENGINE_TENSOR_PARALLEL_SIZE": "2"},
            "engine-parallel",
            "ENGINE_TENSOR_PARALLEL_SIZE=2 x ENGINE_DATA_PARALLEL_SIZE=1 needs 2 engine GPU(s) but ENGINE_GPUS=0 gives "
            "it 1: list 2 device id(s) in ENGINE_GPUS, or set the sizes so TP x DP equals their number",
        ),
        (
            {"ENV_SERVER_STOP_GRACE": "1m", "ENV_SERVER_SHUTDOWN_GRACE_S": "75"},
            "stop-grace",
            "ENV_SERVER_SHUTDOWN_GRACE_S=75 is not below ENV_SERVER_STOP_GRACE=1m (60 s), so Docker would kill "
            "env-server while it still closes sandboxes, and those keep running: set ENV_SERVER_SHUTDOWN_GRACE_S below "
            "60 (default 75 with 90s), or raise ENV_SERVER_STOP_GRACE",
        ),
    ],
)
def test_contradictory_pairs_are_one_line_each(tmp_path, over, check, line):
    assert lines(good_env(tmp_path, **over), tmp_path) == [(check, line)]


@pytest.mark.parametrize(
    "over",
    [
        {"MAX_INFLIGHT_ROLLOUTS": "64"},
        {"MAX_STEPS": "10"},  # SAVE_STEPS' default (25) with a short run: not the operator's choice
        {"MAX_STEPS": "100", "SAVE_STEPS": "100"},
        {"ENGINE_GPUS": "0,1", "ENGINE_TENSOR_PARALLEL_SIZE": "2"},
        {"ENGINE_GPUS": "0,1,2,3", "ENGINE_TENSOR_PARALLEL_SIZE": "2", "ENGINE_DATA_PARALLEL_SIZE": "2"},
        {"ENV_SERVER_STOP_GRACE": "90s", "ENV_SERVER_SHUTDOWN_GRACE_S": "75"},
        {"ENV_SERVER_STOP_GRACE": "2m30s", "ENV_SERVER_SHUTDOWN_GRACE_S": "120"},
    ],
)
def test_the_pairs_that_agree_pass(tmp_path, over):
    assert lines(good_env(tmp_path, **over), tmp_path) == []


def test_an_unknown_weight_transfer_is_one_line_not_two(tmp_path):
    found = [
        (f.check, f.message) for f in run_all(good_env(tmp_path, WEIGHT_TRANSFER="gloo"), probes_for(tmp_path, GCSFUSE))
    ]
    assert found == [
        (
            "trainer-settings",
            "WEIGHT_TRANSFER='gloo' is not allowed: set WEIGHT_TRANSFER to one of: nccl (vLLM's NCCL weight transfer, "
            "GPU), ipc (vLLM's CUDA-IPC weight transfer, engine and trainer on one GPU), mock (the mock engine's HTTP "
            "backend, the CPU form) (default nccl)",
        )
    ]


def test_a_bucket_path_that_is_a_file_is_called_a_file(tmp_path):
    env = good_env(tmp_path)
    shutil.rmtree(tmp_path / "bucket")
    (tmp_path / "bucket").write_text("oops")
    assert dict(lines(env, tmp_path))["bucket-writable"] == (
        f"bucket {tmp_path}/bucket is a file, not a folder: bind the host's BUCKET_PATH (a folder) to {tmp_path}/bucket"
    )


def test_reward_key_is_shown_it_is_not_a_secret():
    from stack.env import shown

    assert shown("REWARD_KEY", "pass\n") == "'pass\\n'"
    assert shown("E2B_API_KEY", "e2b_x") == "<secret, 5 characters>"
    assert shown("SOME_UNDECLARED_TOKEN", "abc") == "<secret, 3 characters>"
