"""Preflight's GPU guards by form (guards/gpu_fit.py): the GPU count of the two-GPU and one-GPU forms, and on one GPU
whether engine + KV cache + trainer fit, each refusal one line with its numbers. GPU count and card size are
injected probes (no GPU here); everything else is the real preflight (run_all)."""

from __future__ import annotations

from test_checks import GCSFUSE, good_env, probes_for

from guards.checks import run_all

ONE_GPU = {"WEIGHT_TRANSFER": "ipc", "REQUIRED_GPUS": "1", "ENGINE_GPU_MEMORY_UTILIZATION": "0.38"}


def found(tmp_path, gpus=1, card=79.2, **env):
    probes = probes_for(tmp_path, GCSFUSE, gpus=gpus)
    probes.gpu_memory_gib = lambda: (card, "test probe")
    out = {f.check: f.message for f in run_all(good_env(tmp_path, **env), probes)}
    return {k: v for k, v in out.items() if k in ("gpus", "one-gpu-fit")}


def test_the_one_gpu_form_passes_on_one_80_gib_gpu(tmp_path):
    assert found(tmp_path, **ONE_GPU) == {}


def test_the_two_gpu_form_on_one_gpu_names_the_overlay(tmp_path):
    assert found(tmp_path, gpus=1) == {
        "gpus": "found 1 GPU(s) (test counter), need REQUIRED_GPUS=2: run on a host with 2 GPUs and the NVIDIA "
        "Container Toolkit (compose reserves them), or use the CPU form (REQUIRED_GPUS=0), or on this one-GPU host "
        "the one-GPU form, `scripts/compose --one-gpu up` (compose.yaml + compose.one-gpu.yaml: WEIGHT_TRANSFER=ipc)"
    }


def test_one_gpu_with_nccl_is_refused(tmp_path):
    assert found(tmp_path, gpus=1, REQUIRED_GPUS="1") == {
        "gpus": "REQUIRED_GPUS=1 with WEIGHT_TRANSFER=nccl: NCCL cannot put the engine's and the trainer's ranks on "
        "one GPU; on a one-GPU host run the one-GPU form, `scripts/compose --one-gpu up` (compose.yaml + "
        "compose.one-gpu.yaml: WEIGHT_TRANSFER=ipc)"
    }


def test_ipc_asking_for_two_gpus_is_refused(tmp_path):
    got = found(tmp_path, gpus=2, **{**ONE_GPU, "REQUIRED_GPUS": "2"})
    assert got["gpus"].startswith("WEIGHT_TRANSFER=ipc puts engine and trainer on one GPU but REQUIRED_GPUS=2")


def test_a_24_gib_card_is_refused_with_the_numbers(tmp_path):
    got = found(tmp_path, card=23.6, TOKEN_BUDGET="8192", **ONE_GPU)
    assert got == {
        "one-gpu-fit": "one GPU of 23.6 GiB is too small for Qwen/Qwen3-1.7B with engine and trainer on it: 23.6 x "
        "0.92 usable = 21.7 GiB < 45.7 GiB needed (trainer 35.0 GiB at TOKEN_BUDGET=8192: 28.5 fixed + 0.307 per "
        "1k tokens + 4 reserved; engine 10.7 GiB: weights 3.2 + KV cache 3.5 for ENGINE_MAX_MODEL_LEN=32768 + "
        "workspace 4 (estimate)). Lower TOKEN_BUDGET or ENGINE_MAX_MODEL_LEN, use a larger card, or the two-GPU form "
        "(compose.yaml alone) [card size by test probe]"
    }


def test_an_unset_engine_share_gets_the_derived_value(tmp_path):
    got = found(tmp_path, **{**ONE_GPU, "ENGINE_GPU_MEMORY_UTILIZATION": ""})["one-gpu-fit"]
    assert got.startswith(
        "ENGINE_GPU_MEMORY_UTILIZATION is unset on one GPU, and the engine's default would leave the trainer "
        "nothing: set ENGINE_GPU_MEMORY_UTILIZATION=0.38 (one GPU of 79.2 GiB: trainer 42.6 GiB"
    )


def test_an_engine_share_that_starves_the_trainer_is_refused(tmp_path):
    got = found(tmp_path, **{**ONE_GPU, "ENGINE_GPU_MEMORY_UTILIZATION": "0.85"})["one-gpu-fit"]
    # 79.2 x 0.92 - 0.85 x 79.2 = 5.5 GiB left for a trainer that needs 42.6.
    assert got.startswith(
        "ENGINE_GPU_MEMORY_UTILIZATION=0.85 leaves the trainer 5.5 GiB of this 79.2 GiB GPU, below the 42.6 GiB it "
        "needs: set ENGINE_GPU_MEMORY_UTILIZATION=0.38"
    )


def test_an_engine_share_too_small_for_weights_and_one_sequence_is_refused(tmp_path):
    got = found(tmp_path, **{**ONE_GPU, "ENGINE_GPU_MEMORY_UTILIZATION": "0.1"})["one-gpu-fit"]
    assert got.startswith(
        "ENGINE_GPU_MEMORY_UTILIZATION=0.1 gives the engine 7.9 GiB, below the 10.7 GiB of weights, one "
        "ENGINE_MAX_MODEL_LEN=32768 sequence's KV cache and workspace: set ENGINE_GPU_MEMORY_UTILIZATION=0.38"
    )


def test_the_fit_is_not_checked_in_the_two_gpu_form(tmp_path):
    assert found(tmp_path, gpus=2, card=23.6) == {}


def test_the_chart_refuses_ipc(tmp_path):
    got = found(tmp_path, DEPLOYMENT="kubernetes", **ONE_GPU)
    assert got["gpus"].startswith("WEIGHT_TRANSFER=ipc is the compose one-GPU form: the chart runs engine and trainer")
