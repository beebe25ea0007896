"""Which form the GPU check runs in, and the environment each of its processes gets in that form (stdlib + the
stack's settings reader only: unit-tested on the CPU host).

- **two-GPU** (the check as it was): the engine on GPU 0, the trainer on GPU 1, `WEIGHT_TRANSFER=nccl` (TRL's
  own NCCL client), the engine at ENGINE_GPU_MEMORY_UTILIZATION (0.85 unless set).
- **one-GPU**: the engine and the trainer both on GPU 0, `WEIGHT_TRANSFER=ipc` (vLLM's CUDA-IPC weight transfer:
  the trainer hands the engine handles to its own weight tensors, nothing is copied between cards). NCCL refuses
  two ranks on one device, so this is the only way the stack's two processes share a card. The engine takes a
  small share of the card so the trainer fits beside it: 0.35 by default, the fraction vLLM 0.25.1 was measured
  working at beside a pusher process on one H200 (issue 36); the trainer's production dtype path peaked at 27.0 GiB
  for 8k packed tokens on this model's shape (issue 36), and the check packs 4k.

Only the one-GPU engine gets VLLM_ALLOW_INSECURE_SERIALIZATION=1: vLLM 0.25.1's ipc engine unpickles the handles
the trainer posts to /update_weights and refuses to without it (ipc_engine.py `parse_update_info`, read at v0.25.1).
The trainer only pickles, so it never gets the switch, nor does the two-GPU engine (nothing there is unpickled).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from stack.env import EnvError

KNOB = "GPU_CHECK_FORM"
CHOICES = ("auto", "one", "two")
ONE, TWO = "one-GPU", "two-GPU"
INSECURE = "VLLM_ALLOW_INSECURE_SERIALIZATION"
FRACTION = "ENGINE_GPU_MEMORY_UTILIZATION"
ALLOC_CONF = "PYTORCH_CUDA_ALLOC_CONF"
# What gpu-check.json shows of each process's environment.
SHOWN = ("CUDA_VISIBLE_DEVICES", "WEIGHT_TRANSFER", FRACTION, INSECURE, "REQUIRED_GPUS", "TRAIN_DTYPE", ALLOC_CONF)
# The trainer's measured peak on this model's shape at the production dtype path (float32 master weights and
# AdamW state, bfloat16 autocast), 8k packed tokens, one H200 (issue 36). The check packs 4k, so this is an upper
# bound for it; what is left of the card beside the engine must hold it.
TRAINER_PEAK_GIB = 27.0


@dataclass(frozen=True)
class Form:
    name: str  # ONE or TWO: every figure of the run is labelled with it
    engine_gpu: str  # CUDA_VISIBLE_DEVICES of the engine
    trainer_gpu: str  # ... and of the trainer
    weight_transfer: str  # WEIGHT_TRANSFER of both
    engine_fraction: str  # ENGINE_GPU_MEMORY_UTILIZATION of both
    compare_device: str  # where the check loads the checkpoint to compare it with the engine (the trainer has exited)

    @property
    def label(self) -> str:
        if self.name == ONE:
            where = f"engine and trainer on GPU {self.engine_gpu}"
        else:
            where = f"engine on GPU {self.engine_gpu}, trainer on GPU {self.trainer_gpu}"
        return f"{self.name} form ({where}, WEIGHT_TRANSFER={self.weight_transfer}, {FRACTION}={self.engine_fraction})"

    @property
    def required_gpus(self) -> int:
        return 1 if self.name == ONE else 2


def choose(knob: str, gpus: int, how: str, env: Mapping[str, str]) -> Form:
    """The form for `gpus` GPUs (counted by `how`) and GPU_CHECK_FORM=`knob`; EnvError in one line when it cannot run."""
    if gpus < 1:
        raise EnvError(f"found no GPU ({how}): run tests/gpu/run on the lent GPU machine (tests/gpu/README.md)")
    if knob == "two" and gpus < 2:
        raise EnvError(
            f"{KNOB}=two needs two GPUs and {how} sees {gpus}: set {KNOB}=auto (or one) to run the "
            "one-GPU form (engine and trainer on GPU 0, WEIGHT_TRANSFER=ipc)"
        )
    one = knob == "one" or (knob == "auto" and gpus == 1)
    fraction = (env.get(FRACTION) or "").strip()
    if one:
        return Form(ONE, "0", "0", "ipc", fraction or "0.35", "cuda:0")
    return Form(TWO, "0", "1", "nccl", fraction or "0.85", "cuda:1")


def engine_env(form: Form, base: Mapping[str, str]) -> dict[str, str]:
    """`base` (the check's environment) with the engine's device, transfer backend and memory share."""
    env = {k: v for k, v in base.items() if k != INSECURE}
    env |= {
        "CUDA_VISIBLE_DEVICES": form.engine_gpu,
        "WEIGHT_TRANSFER": form.weight_transfer,
        FRACTION: form.engine_fraction,
    }
    if form.name == ONE:
        env[INSECURE] = "1"
    return env


def trainer_env(form: Form, base: Mapping[str, str]) -> dict[str, str]:
    """`base` with the trainer's device and transfer backend; never the insecure-serialization switch. In the one-GPU
    form also the engine's memory share, which a trainer on a shared card sizes itself by; the two-GPU trainer has a
    card of its own and keeps what it inherits, as before."""
    env = {k: v for k, v in base.items() if k != INSECURE}
    env |= {
        "CUDA_VISIBLE_DEVICES": form.trainer_gpu,
        "WEIGHT_TRANSFER": form.weight_transfer,
        "REQUIRED_GPUS": str(form.required_gpus),
    }
    if form.name == ONE:
        # As compose.one-gpu.yaml gives the trainer (issue 36): no expandable segments. Their memory is shared through
        # pidfd_getfd, which needs a shared PID namespace and ptrace permission (pytorch issue 165685), where the
        # default allocator's cudaIpc handles need neither.
        env |= {FRACTION: form.engine_fraction, ALLOC_CONF: ""}
    return env


def fit_problem(form: Form, card_mib: int) -> str | None:
    """One line when the card cannot hold the trainer beside the engine's share (one-GPU form only), else None."""
    if form.name != ONE:
        return None
    try:
        fraction = float(form.engine_fraction)
    except ValueError:
        return None  # the launcher refuses a non-number with its own line
    left_gib = card_mib / 1024 * (1 - fraction)
    if left_gib >= TRAINER_PEAK_GIB:
        return None
    return (
        f"gpu-check: one-GPU form: the card has {card_mib / 1024:.1f} GiB and the engine takes {FRACTION}="
        f"{form.engine_fraction}, leaving {left_gib:.1f} GiB for the trainer, which peaked at {TRAINER_PEAK_GIB} GiB "
        f"on this model (issue 36): lower {FRACTION} (the engine needs the 2.8 GB model and its KV cache) or use a "
        "larger card"
    )


def launcher_backend(argv: list[str]) -> str | None:
    """The weight-transfer backend the launcher's `vllm serve` argv names, or None where it names none."""
    import json

    for i, token in enumerate(argv):
        value = None
        if token == "--weight-transfer-config" and i + 1 < len(argv):
            value = argv[i + 1]
        elif token.startswith("--weight-transfer-config="):
            value = token.split("=", 1)[1]
        if value is not None:
            try:
                return str(json.loads(value).get("backend"))
            except (ValueError, AttributeError):
                return value
    return None
