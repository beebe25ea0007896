"""The GPU check's knobs and folders (tests/gpu/check_settings.py): what runs on the GPU machine, checked here
because it is pure. A fresh run name and folder every run, unless told to resume; bad knobs named in one line."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "gpu"))

import check_settings  # noqa: E402

from stack.env import EnvError  # noqa: E402

BUILD = Path(__file__).resolve().parents[2] / "gpu" / "build_model.py"


def knobs(tmp_path, **env):
    return check_settings.read({"GPU_CHECK_WORK": str(tmp_path), **env})


def test_the_defaults_are_the_checks_measured_settings(tmp_path):
    k = knobs(tmp_path)
    assert (k.steps, k.rollouts_per_step, k.token_budget, k.concurrent_rollouts, k.resume) == (3, None, 4096, 8, "")
    assert check_settings.trainer_env(k, "r") == {
        "RUN_NAME": "r",
        "MAX_STEPS": "3",
        "MAX_INFLIGHT_ROLLOUTS": "8",
        "TOKEN_BUDGET": "4096",
    }


def test_steps_rollouts_per_step_and_concurrency_reach_the_trainer(tmp_path):
    k = knobs(tmp_path, GPU_CHECK_STEPS="20", GPU_CHECK_ROLLOUTS_PER_STEP="16", GPU_CHECK_CONCURRENT_ROLLOUTS="32")
    assert check_settings.trainer_env(k, "r") == {
        "RUN_NAME": "r",
        "MAX_STEPS": "20",
        "MAX_INFLIGHT_ROLLOUTS": "32",
        # a fixed count per step is TRL's fixed-count micro-batch, not a token budget
        "TOKEN_BUDGET": "0",
        "PER_DEVICE_TRAIN_BATCH_SIZE": "16",
    }


def test_every_bad_knob_is_named_in_one_line(tmp_path):
    with pytest.raises(EnvError) as err:
        knobs(tmp_path, GPU_CHECK_STEPS="three", GPU_CHECK_ROLLOUTS_PER_STEP="0", GPU_CHECK_CONCURRENT_ROLLOUTS="-1")
    assert str(err.value).splitlines() == [
        "GPU_CHECK_ROLLOUTS_PER_STEP='0' is below 1: set GPU_CHECK_ROLLOUTS_PER_STEP to at least 1 (default 0)",
        "GPU_CHECK_STEPS='three' is not a whole number: set GPU_CHECK_STEPS to an integer (default 3)",
        "GPU_CHECK_CONCURRENT_ROLLOUTS='-1' is below 1: set GPU_CHECK_CONCURRENT_ROLLOUTS to at least 1 (default 8)",
    ]


def test_two_runs_get_two_names_and_two_folders_and_share_the_model(tmp_path):
    k = knobs(tmp_path)
    first = check_settings.plan(k, BUILD, now=0)
    second = check_settings.plan(k, BUILD, now=0)
    assert first.run != second.run and first.run.startswith("gpu-check-19700101T000000Z-")
    assert first.run_dir == tmp_path / "runs" / first.run and first.run_dir.is_dir() and second.run_dir.is_dir()
    assert first.bucket == first.run_dir / "bucket" and first.out == first.run_dir / "out"
    assert first.model == second.model == check_settings.model_dir(tmp_path, BUILD)
    assert first.model.parent == tmp_path / "models" and (first.start_step, second.start_step) == (0, 0)


def test_the_model_folder_changes_with_the_build_script(tmp_path):
    other = tmp_path / "build_model.py"
    other.write_text(BUILD.read_text() + "\n# changed\n")
    assert check_settings.model_dir(tmp_path, other) != check_settings.model_dir(tmp_path, BUILD)


def _complete(ckpt, step):
    """A checkpoint stack/resume.py resumes from: its step stated and its weights whole (a 4-byte tensor)."""
    header = b'{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
    (ckpt / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header + b"\0" * 4)
    (ckpt / "trainer_state.json").write_text(f'{{"global_step": {step}}}')


def test_resume_reuses_the_runs_name_and_folder_from_its_last_complete_checkpoint(tmp_path):
    first = check_settings.plan(knobs(tmp_path), BUILD)
    for step, complete in ((1, True), (2, True), (3, False)):
        ckpt = first.bucket / "checkpoints" / first.run / f"checkpoint-{step}"
        ckpt.mkdir(parents=True)
        if complete:
            _complete(ckpt, step)
    resumed = check_settings.plan(knobs(tmp_path, GPU_CHECK_RESUME=first.run, GPU_CHECK_STEPS="5"), BUILD)
    assert (resumed.run, resumed.run_dir, resumed.start_step) == (first.run, first.run_dir, 2)


def test_resume_of_a_finished_run_asks_for_more_steps(tmp_path):
    first = check_settings.plan(knobs(tmp_path), BUILD)
    ckpt = first.bucket / "checkpoints" / first.run / "checkpoint-3"
    ckpt.mkdir(parents=True)
    _complete(ckpt, 3)
    with pytest.raises(EnvError) as err:
        check_settings.plan(knobs(tmp_path, GPU_CHECK_RESUME=first.run), BUILD)
    assert str(err.value) == (
        f"GPU_CHECK_RESUME='{first.run}' has reached step 3 already and GPU_CHECK_STEPS=3: "
        "set GPU_CHECK_STEPS above 3 to train on"
    )


def test_resume_of_an_unknown_run_lists_the_runs_there_are(tmp_path):
    first = check_settings.plan(knobs(tmp_path), BUILD)
    with pytest.raises(EnvError) as err:
        check_settings.plan(knobs(tmp_path, GPU_CHECK_RESUME="gpu-check"), BUILD)
    assert str(err.value) == (
        f"GPU_CHECK_RESUME='gpu-check' names no run under {tmp_path / 'runs'}: set it to one of {first.run}, "
        "or leave it unset for a fresh run"
    )


def test_out_overrides_the_runs_own_out_folder(tmp_path):
    layout = check_settings.plan(knobs(tmp_path), BUILD, out=str(tmp_path / "device-out"))
    assert layout.out == tmp_path / "device-out" and layout.out.is_dir()
