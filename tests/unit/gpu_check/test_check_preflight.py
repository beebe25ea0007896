"""What the GPU check finds before it starts anything on the GPU (tests/gpu/check_stack.py `preflight`), with the
project's real launcher, precision rule and trainer guards, and what it reads back from the trainer's log and
prints: a failure said in one line naming its fix, every printed figure labelled with the form.

Three tests need the ipc form from issue 36 item 1 (the WEIGHT_TRANSFER=ipc registry entry, the launcher's flag
and the trainer's dtype rule for it), built on another branch: they skip until `ipc` is a WEIGHT_TRANSFER choice,
and then hold that branch to what the check needs."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "gpu"))

import check_form  # noqa: E402
import check_stack  # noqa: E402

from stack.backends import WEIGHT_TRANSFERS  # noqa: E402
from stack.sizing import precision  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
ONE = check_form.choose("auto", 1, "test", {})
TWO = check_form.choose("auto", 2, "test", {})
needs_ipc = pytest.mark.skipif(
    "ipc" not in WEIGHT_TRANSFERS.names, reason="WEIGHT_TRANSFER=ipc is issue 36 item 1, on another branch"
)


def engine_env(form, **extra):
    base = {"MODEL": "/tmp/gpu-check/models/abc", "ENGINE_PORT": "8001", "ENGINE_MAX_MODEL_LEN": "8192", **extra}
    return check_form.engine_env(form, base)


def trainer_env(form, tmp_path, **extra):
    base = {
        "MODEL": "/tmp/gpu-check/models/abc",
        "ENGINE_URL": "http://127.0.0.1:8001",
        "BUCKET_DIR": str(tmp_path),
        "HF_HOME": str(tmp_path / "hf-home"),
        "BUCKET_NOT_A_MOUNT_OK": "i-accept-losing-checkpoints",
        "SANDBOX": "docker",
        "TUNNEL_PROVIDER": "direct",
        "DATASETS": "local",
        "TRAIN_DTYPE": "float32",
        "RUN_NAME": "gpu-check-x",
        **extra,
    }
    return check_form.trainer_env(form, base)


def test_the_two_gpu_form_trains_the_production_dtype_path_and_its_engine_gets_nccl():
    assert check_stack.precision_problem(TWO, "float32") is None
    assert check_stack.launcher_problem(TWO, engine_env(TWO)) is None


def test_a_form_whose_transfer_gets_the_cpu_forms_float32_is_refused_before_the_engine_starts():
    cpu_like = check_form.Form("one-GPU", "0", "0", "mock", "0.35", "cuda:0")
    assert check_stack.precision_problem(cpu_like, "float32") == (
        "gpu-check: one-GPU form: the trainer would run float32 weights, AdamW state and compute with "
        "WEIGHT_TRANSFER=mock, not the production path (float32 weights and AdamW state, bfloat16 compute "
        "(autocast)): stack/sizing/precision.py `choose` must give WEIGHT_TRANSFER=mock bfloat16 autocast as it gives nccl"
    )
    assert check_stack.PRODUCTION.describe() == "float32 weights and AdamW state, bfloat16 compute (autocast)"


def test_a_launcher_that_starts_the_engine_with_another_backend_is_refused_before_the_engine_starts():
    # the real launcher, given nccl, while the form pushes by ipc
    assert check_stack.launcher_problem(ONE, engine_env(TWO)) == (
        "gpu-check: one-GPU form: the launcher starts vLLM with --weight-transfer-config backend 'nccl', not "
        "'ipc': services/engine/command.py must take the backend from WEIGHT_TRANSFER"
    )


def test_a_bad_trainer_setting_is_the_trainers_own_line(tmp_path):
    lines = check_stack.trainer_problems(TWO, trainer_env(TWO, tmp_path, LEARNING_RATE="fast"))
    assert any(
        line.startswith("gpu-check: two-GPU form: the trainer would refuse to start: LEARNING_RATE='fast'")
        for line in lines
    ), lines


@needs_ipc
def test_ipc_the_one_gpu_trainer_runs_the_production_dtype_path():
    assert precision.choose("ipc", "float32") == check_stack.PRODUCTION
    assert check_stack.precision_problem(ONE, "float32") is None


@needs_ipc
def test_ipc_the_launcher_starts_the_one_gpu_engine_with_the_ipc_backend():
    assert check_stack.launcher_problem(ONE, engine_env(ONE)) is None


@needs_ipc
def test_ipc_the_trainer_accepts_the_one_gpu_settings(tmp_path):
    lines = check_stack.trainer_problems(ONE, trainer_env(ONE, tmp_path))
    # the module check (`needs ... in the trainer image`) depends on what this host carries (no vllm): any other
    # line is the form's fault
    assert [line for line in lines if " in the trainer image: " not in line] == [], lines


def trainer_log(transfer: str, dtype_line: str) -> str:
    return "\n".join(
        [
            "trainer attention kernel: FlashAttention-2 varlen (torch aten) under TRL tree_attention",
            f"trainer: run gpu-check-x -> /b/checkpoints/gpu-check-x (new run); agent step limit 3, weight transfer "
            f"{transfer}",
            "trainer: stop rules ...",
            f"trainer: {dtype_line} at learning rate 2e-05; max_staleness 4 steps (auto)",
            "trainer: first weight sync done: group set up in 0.01 s, weights sent in 0.231 s",
            "{'perf/step_s': '8.7', 'perf/weight_sync_s': '0.2'}",
            "trainer torch peak: reserved 30720 MiB, allocated 25600 MiB",
        ]
    )


def test_the_trainers_path_is_read_back_from_its_own_lines():
    said = check_stack.trainer_said(trainer_log("ipc", check_stack.PRODUCTION.describe()))
    assert said == {
        "trainer_weight_transfer": "ipc",
        "trainer_precision": "float32 weights and AdamW state, bfloat16 compute (autocast)",
        "trainer_attention_kernel": "FlashAttention-2 varlen (torch aten) under TRL tree_attention",
        "trainer_first_sync": "group set up in 0.01 s, weights sent in 0.231 s",
        "trainer_torch_peak_mib": {"reserved": 30720, "allocated": 25600},
    }
    assert check_stack.windows(trainer_log("ipc", "x"), "perf/weight_sync_s") == [0.2]


def test_every_printed_figure_carries_the_form_even_for_a_run_that_stopped_early(capsys):
    check_stack.print_summary({"form": "one-GPU", "form_detail": ONE.label, "engine_start_s": 101.2})
    out = capsys.readouterr().out.strip().splitlines()
    assert out[0] == ONE.label
    assert out[1:3] == ["| form | figure | value |", "|---|---|---|"]
    rows = out[3:]
    assert len(rows) == len(check_stack.summary_rows({})) and all(r.startswith("| one-GPU | ") for r in rows)
    assert rows[0] == "| one-GPU | engine start (launcher to probe-healthy) | 101.2 s |"
    assert "| one-GPU | of which IPC transfer (perf/weight_sync_transfer_s) | - |" in rows


def test_a_bad_form_knob_stops_the_check_with_one_line(tmp_path):
    env = {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": f"{REPO / 'services'}:{REPO / 'tests' / 'gpu'}",
        "GPU_CHECK_WORK": str(tmp_path),
        "GPU_CHECK_FORM": "both",
    }
    done = subprocess.run(
        [sys.executable, str(REPO / "tests/gpu/check_stack.py")], env=env, capture_output=True, text=True
    )
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "gpu-check: GPU_CHECK_FORM='both' is not allowed: set GPU_CHECK_FORM to auto (by the GPUs seen), one "
        "(engine and trainer on GPU 0, ipc) or two (engine on GPU 0, trainer on GPU 1, nccl) (default auto)"
    )


def test_an_ipc_engine_that_cannot_import_ray_is_named_with_the_package_to_carry(tmp_path):
    # vllm is not on this host: a stand-in package whose ipc_engine.py starts as vLLM 0.25.1's does, `import ray`
    # at module top (this host has no ray either, as the GPU image has none)
    module = tmp_path / "vllm" / "distributed" / "weight_transfer"
    module.mkdir(parents=True)
    for folder in (tmp_path / "vllm", tmp_path / "vllm" / "distributed", module):
        (folder / "__init__.py").write_text("")
    (module / "ipc_engine.py").write_text("import pickle\n\nimport ray\n")
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(tmp_path)}
    assert check_stack.ipc_engine_problem(env) == (
        "gpu-check: one-GPU form: vllm.distributed.weight_transfer.ipc_engine does not import (ModuleNotFoundError: "
        "No module named 'ray'): carry ray with the check's packages (tests/gpu/carry-requirements.txt)"
    )
    (module / "ipc_engine.py").write_text("import pickle\n")
    assert check_stack.ipc_engine_problem(env) is None
