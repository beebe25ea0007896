"""Which form the GPU check runs in (tests/gpu/check_form.py) and the environment each of its processes gets in it:
pure, so checked here; the GPU machine runs it. One GPU: engine and trainer on GPU 0 with vLLM's CUDA-IPC pushes
and the engine at a small memory share; two GPUs: the NCCL check as it was. The insecure-serialization switch
reaches the one-GPU engine only."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "gpu"))

import check_form  # noqa: E402
import check_settings  # noqa: E402

from stack.env import EnvError  # noqa: E402

BASE = {"PATH": "/usr/bin", "HF_HOME": "/run/hf", "CUDA_VISIBLE_DEVICES": "0,1"}


def test_auto_picks_the_one_gpu_form_on_one_gpu_and_the_two_gpu_form_on_two_or_more():
    one = check_form.choose("auto", 1, "nvidia-smi", {})
    assert (one.name, one.engine_gpu, one.trainer_gpu, one.weight_transfer, one.engine_fraction) == (
        "one-GPU",
        "0",
        "0",
        "ipc",
        "0.35",
    )
    assert (one.compare_device, one.required_gpus) == ("cuda:0", 1)
    assert one.label == (
        "one-GPU form (engine and trainer on GPU 0, WEIGHT_TRANSFER=ipc, ENGINE_GPU_MEMORY_UTILIZATION=0.35)"
    )
    for gpus in (2, 8):
        two = check_form.choose("auto", gpus, "nvidia-smi", {})
        assert (two.name, two.engine_gpu, two.trainer_gpu, two.weight_transfer, two.engine_fraction) == (
            "two-GPU",
            "0",
            "1",
            "nccl",
            "0.85",
        )
        assert (two.compare_device, two.required_gpus) == ("cuda:1", 2)
        assert two.label == (
            "two-GPU form (engine on GPU 0, trainer on GPU 1, WEIGHT_TRANSFER=nccl, ENGINE_GPU_MEMORY_UTILIZATION=0.85)"
        )


def test_the_knob_forces_a_form():
    assert check_form.choose("one", 2, "nvidia-smi", {}).name == "one-GPU"
    assert check_form.choose("two", 2, "nvidia-smi", {}).name == "two-GPU"


def test_the_two_gpu_form_on_one_gpu_and_no_gpu_at_all_are_refused_in_one_line():
    with pytest.raises(EnvError) as err:
        check_form.choose("two", 1, "nvidia-smi", {})
    assert str(err.value) == (
        "GPU_CHECK_FORM=two needs two GPUs and nvidia-smi sees 1: set GPU_CHECK_FORM=auto (or one) to run the "
        "one-GPU form (engine and trainer on GPU 0, WEIGHT_TRANSFER=ipc)"
    )
    for knob in check_form.CHOICES:
        with pytest.raises(EnvError) as err:
            check_form.choose(knob, 0, "no nvidia-smi and no torch", {})
        assert str(err.value) == (
            "found no GPU (no nvidia-smi and no torch): run tests/gpu/run on the lent GPU machine (tests/gpu/README.md)"
        )


def test_a_set_engine_memory_share_is_kept_in_either_form():
    env = {"ENGINE_GPU_MEMORY_UTILIZATION": " 0.3 "}
    assert check_form.choose("auto", 1, "x", env).engine_fraction == "0.3"
    assert check_form.choose("auto", 2, "x", env).engine_fraction == "0.3"


def test_the_knob_is_read_with_the_other_knobs_and_a_bad_value_is_named(tmp_path):
    assert check_settings.read({"GPU_CHECK_WORK": str(tmp_path)}).form == "auto"
    assert check_settings.read({"GPU_CHECK_WORK": str(tmp_path), "GPU_CHECK_FORM": "One"}).form == "one"
    with pytest.raises(EnvError) as err:
        check_settings.read({"GPU_CHECK_WORK": str(tmp_path), "GPU_CHECK_FORM": "1"})
    assert str(err.value) == (
        "GPU_CHECK_FORM='1' is not allowed: set GPU_CHECK_FORM to auto (by the GPUs seen), one (engine and trainer "
        "on GPU 0, ipc) or two (engine on GPU 0, trainer on GPU 1, nccl) (default auto)"
    )


def test_one_gpu_form_engine_and_trainer_share_gpu_0_and_only_the_engine_may_unpickle():
    form = check_form.choose("auto", 1, "x", {})
    base = {**BASE, "VLLM_ALLOW_INSECURE_SERIALIZATION": "1", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    engine, trainer = check_form.engine_env(form, base), check_form.trainer_env(form, base)
    assert {k: engine.get(k) for k in check_form.SHOWN} == {
        "CUDA_VISIBLE_DEVICES": "0",
        "WEIGHT_TRANSFER": "ipc",
        "ENGINE_GPU_MEMORY_UTILIZATION": "0.35",
        "VLLM_ALLOW_INSECURE_SERIALIZATION": "1",
        "REQUIRED_GPUS": None,
        "TRAIN_DTYPE": None,
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",  # the engine's own allocator: not the trainer's tensors
    }
    assert {k: trainer.get(k) for k in check_form.SHOWN} == {
        "CUDA_VISIBLE_DEVICES": "0",
        "WEIGHT_TRANSFER": "ipc",
        # the trainer sizes itself on a shared card by the engine's share
        "ENGINE_GPU_MEMORY_UTILIZATION": "0.35",
        "VLLM_ALLOW_INSECURE_SERIALIZATION": None,
        "REQUIRED_GPUS": "1",
        "TRAIN_DTYPE": None,
        # as compose.one-gpu.yaml: the shared tensors from the default allocator, not expandable segments
        "PYTORCH_CUDA_ALLOC_CONF": "",
    }
    assert engine["HF_HOME"] == trainer["HF_HOME"] == "/run/hf"  # the rest of the base passes through


def test_two_gpu_form_is_the_nccl_check_as_it_was_with_no_insecure_switch_anywhere():
    form = check_form.choose("auto", 2, "x", {})
    stray = {**BASE, "VLLM_ALLOW_INSECURE_SERIALIZATION": "1", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    engine, trainer = check_form.engine_env(form, stray), check_form.trainer_env(form, stray)
    assert {k: engine.get(k) for k in check_form.SHOWN} == {
        "CUDA_VISIBLE_DEVICES": "0",
        "WEIGHT_TRANSFER": "nccl",
        "ENGINE_GPU_MEMORY_UTILIZATION": "0.85",
        "VLLM_ALLOW_INSECURE_SERIALIZATION": None,
        "REQUIRED_GPUS": None,
        "TRAIN_DTYPE": None,
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
    }
    assert {k: trainer.get(k) for k in check_form.SHOWN} == {
        "CUDA_VISIBLE_DEVICES": "1",
        "WEIGHT_TRANSFER": "nccl",
        # a card of its own: the engine's share is not the trainer's business (inherited, unset here)
        "ENGINE_GPU_MEMORY_UTILIZATION": None,
        "VLLM_ALLOW_INSECURE_SERIALIZATION": None,
        "REQUIRED_GPUS": "2",
        "TRAIN_DTYPE": None,
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",  # inherited, as before
    }


def test_a_card_too_small_for_the_trainer_beside_the_engine_is_refused_with_the_numbers():
    one = check_form.choose("auto", 1, "x", {})
    assert check_form.fit_problem(one, 143771) is None  # one H200: 140.4 GiB, 91.3 left beside 0.35
    assert check_form.fit_problem(one, 40 * 1024) == (
        "gpu-check: one-GPU form: the card has 40.0 GiB and the engine takes ENGINE_GPU_MEMORY_UTILIZATION=0.35, "
        "leaving 26.0 GiB for the trainer, which peaked at 27.0 GiB on this model (issue 36): lower "
        "ENGINE_GPU_MEMORY_UTILIZATION (the engine needs the 2.8 GB model and its KV cache) or use a larger card"
    )
    # the two-GPU trainer has its own card
    assert check_form.fit_problem(check_form.choose("auto", 2, "x", {}), 40 * 1024) is None


def test_the_launchers_backend_is_read_from_its_argv():
    assert check_form.launcher_backend(["vllm", "serve", "m", "--weight-transfer-config", '{"backend":"ipc"}']) == "ipc"
    assert check_form.launcher_backend(["vllm", '--weight-transfer-config={"backend": "nccl"}']) == "nccl"
    assert check_form.launcher_backend(["vllm", "serve", "m"]) is None
