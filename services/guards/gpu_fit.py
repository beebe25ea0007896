"""The GPU guards that depend on the form: how many GPUs (two-GPU form, or one GPU through WEIGHT_TRANSFER=ipc),
and, on one GPU, whether engine and trainer fit on it together (stack/sizing/gpu_share.py has the arithmetic).

The form is the weight transfer's (stack/backends.py): NCCL cannot put the engine's rank and the trainer's on one
device, so `nccl` needs a GPU each; `ipc` (compose.one-gpu.yaml) shares GPU 0.
"""

from __future__ import annotations

import shutil
import subprocess

from stack.backends import WEIGHT_TRANSFERS

ONE_GPU_FORM = "`scripts/compose --one-gpu up` (compose.yaml + compose.one-gpu.yaml: WEIGHT_TRANSFER=ipc)"


def _transfer(env):
    from .checks import _get

    # A value outside the field's choices reads as its default here; trainer-settings reports it.
    return WEIGHT_TRANSFERS.get(_get(env, "WEIGHT_TRANSFER"))


def check_gpus(env, probes):
    from . import cluster

    required = env.checked("REQUIRED_GPUS")
    transfer = _transfer(env)
    if cluster.on_kubernetes(env.env):
        if transfer.same_gpu:
            return (
                f"WEIGHT_TRANSFER={transfer.name} is the compose one-GPU form: the chart runs engine and trainer as "
                "two pods with a GPU each, which CUDA IPC cannot join (deploy/helm README); use WEIGHT_TRANSFER=nccl"
            )
        # REQUIRED_GPUS is this pod's own count there (the chart sets it per pod): the form rules below are the host's.
        return _count(required, probes, transfer)
    if required == 0:
        return None
    if transfer.same_gpu and required != 1:
        return (
            f"WEIGHT_TRANSFER={transfer.name} puts engine and trainer on one GPU but REQUIRED_GPUS={required}: "
            "set REQUIRED_GPUS=1 (compose.one-gpu.yaml does), or WEIGHT_TRANSFER=nccl for a GPU each"
        )
    if not transfer.same_gpu and required == 1:
        return (
            f"REQUIRED_GPUS=1 with WEIGHT_TRANSFER={transfer.name}: NCCL cannot put the engine's and the trainer's "
            f"ranks on one GPU; on a one-GPU host run the one-GPU form, {ONE_GPU_FORM}"
        )
    return _count(required, probes, transfer)


def _count(required, probes, transfer):
    from .checks import count_gpus

    if required == 0:
        return None
    found, how = (probes.gpu_count or count_gpus)()
    if found >= required:
        return None
    line = (
        f"found {found} GPU(s) ({how}), need REQUIRED_GPUS={required}: run on a host with {required} GPUs and "
        "the NVIDIA Container Toolkit (compose reserves them), or use the CPU form (REQUIRED_GPUS=0)"
    )
    if found == 1 and not transfer.same_gpu:
        line += f", or on this one-GPU host the one-GPU form, {ONE_GPU_FORM}"
    return line


def gpu0_memory_gib() -> tuple[float | None, str]:
    """(total memory of GPU 0 in GiB, how it was read); None where nothing could read it."""
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits", "-i", "0"],
                capture_output=True,
                text=True,
                timeout=30,
            )
            if out.returncode == 0 and out.stdout.strip():
                return float(out.stdout.split()[0]) / 1024, "nvidia-smi"
        except (OSError, subprocess.TimeoutExpired, ValueError):
            pass
    try:
        import torch

        if torch.cuda.is_available():
            return torch.cuda.get_device_properties(0).total_memory / 2**30, "torch.cuda"
    except Exception:  # no torch (host venv) or a broken CUDA runtime
        pass
    return None, "no nvidia-smi and no torch"


def engine_fraction(env) -> float | None:
    """ENGINE_GPU_MEMORY_UTILIZATION as the engine will read it; None when unset (the engine's default applies).
    A value that is not a number is the engine launcher's own refusal."""
    raw = env.read.as_given("ENGINE_GPU_MEMORY_UTILIZATION").strip()
    try:
        return float(raw) if raw else None
    except ValueError:
        return None


def check_one_gpu_fit(env, probes):
    """On one GPU: model + KV cache + trainer fit the card, and ENGINE_GPU_MEMORY_UTILIZATION leaves the trainer
    its measured need. One line with the numbers, and the derived fraction to set."""
    from stack.sizing import gpu_share, limits, precision

    if env.checked("REQUIRED_GPUS") == 0 or not _transfer(env).same_gpu:
        return None
    settings, _problems = env.trainer()  # a bad trainer setting is trainer-settings' line
    card, how = (getattr(probes, "gpu_memory_gib", None) or gpu0_memory_gib)()
    if card is None:
        return None  # no GPU to measure: the gpus check says so
    chosen = precision.choose(settings.weight_transfer, settings.dtype)
    try:
        setting = limits.GC_COMPILE if settings.compile_layers else limits.GC
        plan = gpu_share.split(
            card, settings.model, settings.token_budget, settings.engine_max_model_len, chosen, setting
        )
    except gpu_share.DoesNotFit as exc:
        return f"{exc} [card size by {how}]"
    except limits.UnknownModel as exc:
        if engine_fraction(env) is not None:
            return None  # the operator chose the split for a model nobody measured; vLLM reports what it got
        return f"{exc}; or set ENGINE_GPU_MEMORY_UTILIZATION yourself (the engine's share of the one GPU)"
    set_to = engine_fraction(env)
    fix = f"set ENGINE_GPU_MEMORY_UTILIZATION={plan.engine_fraction:.2f} ({plan.line()})"
    if set_to is None:
        return (
            f"ENGINE_GPU_MEMORY_UTILIZATION is unset on one GPU, and the engine's default would leave the trainer "
            f"nothing: {fix}; `scripts/compose --one-gpu` derives and sets it"
        )
    if set_to > plan.engine_fraction + 1e-9:
        return (
            f"ENGINE_GPU_MEMORY_UTILIZATION={set_to:g} leaves the trainer {card * limits.USABLE_FRACTION - set_to * card:.1f} "
            f"GiB of this {card:.1f} GiB GPU, below the {plan.trainer_gib:.1f} GiB it needs: {fix}"
        )
    if set_to * card < plan.engine_min_gib:
        return (
            f"ENGINE_GPU_MEMORY_UTILIZATION={set_to:g} gives the engine {set_to * card:.1f} GiB, below the "
            f"{plan.engine_min_gib:.1f} GiB of weights, one ENGINE_MAX_MODEL_LEN={plan.max_model_len} sequence's KV "
            f"cache and workspace: {fix}"
        )
    return None
