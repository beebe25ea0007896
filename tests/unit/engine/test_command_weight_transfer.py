"""The engine's weight transfer comes from WEIGHT_TRANSFER (the trainer's setting): nccl by default, ipc in the
one-GPU form, and the insecure-serialization switch on in the ipc form only."""

import json

import pytest

from engine.command import EnvError, build_command, build_environment

BASE = {"MODEL": "Qwen/Qwen3-1.7B", "ENGINE_PORT": "8001"}


def backend(env):
    argv = build_command(env)
    return json.loads(argv[argv.index("--weight-transfer-config") + 1])


def test_nccl_by_default_and_ipc_in_the_one_gpu_form():
    assert backend(BASE) == {"backend": "nccl"}
    assert backend({**BASE, "WEIGHT_TRANSFER": "ipc"}) == {"backend": "ipc"}


def test_the_mock_transfer_is_not_a_vllm_one():
    with pytest.raises(EnvError, match=r"WEIGHT_TRANSFER=mock is not a vLLM weight transfer: set WEIGHT_TRANSFER=nccl"):
        build_command({**BASE, "WEIGHT_TRANSFER": "mock"})


def test_the_insecure_switch_is_on_in_the_ipc_form_only():
    assert build_environment({**BASE, "WEIGHT_TRANSFER": "ipc"})["VLLM_ALLOW_INSECURE_SERIALIZATION"] == "1"
    assert "VLLM_ALLOW_INSECURE_SERIALIZATION" not in build_environment(BASE)
    # Set by hand in the two-GPU form, it is taken away: nothing there needs vLLM to unpickle a request body.
    leaked = build_environment({**BASE, "WEIGHT_TRANSFER": "nccl", "VLLM_ALLOW_INSECURE_SERIALIZATION": "1"})
    assert "VLLM_ALLOW_INSECURE_SERIALIZATION" not in leaked


def test_the_weight_transfer_flag_cannot_be_restated_in_extra_args():
    with pytest.raises(EnvError, match="--weight-transfer-config"):
        build_command({**BASE, "WEIGHT_TRANSFER": "ipc", "ENGINE_EXTRA_ARGS": "--weight-transfer-config '{}'"})
