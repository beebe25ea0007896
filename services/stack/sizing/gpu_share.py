"""One GPU for engine and trainer (WEIGHT_TRANSFER=ipc): how to split its memory, and whether it fits at all.

Pure (no torch): preflight, `scripts/compose --one-gpu` (on the host, `python3 -m stack.sizing.gpu_share`) and the unit
tests import it.

The engine starts first (the trainer waits for it to be healthy), and vLLM takes `--gpu-memory-utilization` of the
card's TOTAL memory for itself at start. So the split is decided by the trainer, whose need is measured: its loss
step's peak at TOKEN_BUDGET packed tokens (limits.MemoryProfile, with the float32 master weights' computed extra,
limits.with_precision) plus limits.RESERVED_GIB for what torch does not count (CUDA context, allocator slack). The
engine gets what is left of the usable card (limits.USABLE_FRACTION), rounded DOWN to a hundredth.

The engine must then hold the model's weights, a KV cache for at least one ENGINE_MAX_MODEL_LEN sequence (vLLM
refuses to start with less) and its own workspace. Weights are parameters x 2 bytes (bf16, precision.SHAPES); the
KV cache is 2 (K and V) x layers x KV heads x head dim x 2 bytes per token (ENGINE_SHAPES, from the model's
config.json). ENGINE_WORKSPACE_GIB is an ESTIMATE, not measured here: vLLM's activation peak at profiling, CUDA
graphs and the sampler, which vLLM itself reports at start ("model weights took", "KV cache") for the operator to
replace it with.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass

from stack.sizing import limits
from stack.sizing.precision import SHAPES, Precision

# From each model's config.json: (num_key_value_heads, head_dim). Qwen3-1.7B: 8 KV heads of 128.
ENGINE_SHAPES = {"Qwen/Qwen3-1.7B": (8, 128)}
ENGINE_DTYPE_BYTES = 2  # bf16 weights and KV cache, ENGINE_DTYPE's default
# ESTIMATE (module docstring): vLLM's profiled activations, CUDA graphs, sampler and CUDA context for a small model.
ENGINE_WORKSPACE_GIB = 4.0
# The engine's share is rounded down to this, so the trainer never gets less than it needs.
FRACTION_STEP = 0.01
# The trainer's production precision on a GPU (precision.choose for ipc and float32): float32 master + bf16 compute.
PRODUCTION_PRECISION = Precision(weights="float32", compute="bfloat16")


class DoesNotFit(ValueError):
    """The card is too small for engine and trainer together: one line, with the numbers."""


@dataclass(frozen=True)
class Split:
    card_gib: float
    model: str
    token_budget: int
    max_model_len: int
    trainer_gib: float  # the trainer's measured peak at token_budget + limits.RESERVED_GIB
    weights_gib: float
    kv_gib: float  # one max_model_len sequence
    workspace_gib: float
    engine_fraction: float  # ENGINE_GPU_MEMORY_UTILIZATION to set

    @property
    def engine_min_gib(self) -> float:
        return self.weights_gib + self.kv_gib + self.workspace_gib

    @property
    def engine_gib(self) -> float:
        return self.engine_fraction * self.card_gib

    @property
    def kv_room_gib(self) -> float:
        """KV cache the engine's share holds beyond the weights and workspace (concurrent rollouts live here)."""
        return self.engine_gib - self.weights_gib - self.workspace_gib

    def line(self) -> str:
        return (
            f"one GPU of {self.card_gib:.1f} GiB: trainer {self.trainer_gib:.1f} GiB (measured profile at "
            f"TOKEN_BUDGET={self.token_budget} + {limits.RESERVED_GIB:g} reserved), engine "
            f"ENGINE_GPU_MEMORY_UTILIZATION={self.engine_fraction:.2f} = {self.engine_gib:.1f} GiB (weights "
            f"{self.weights_gib:.1f} + workspace {self.workspace_gib:g} (estimate) + KV cache {self.kv_room_gib:.1f} "
            f"GiB, {self.kv_room_gib / self.kv_gib:.1f}x one {self.max_model_len}-token sequence)"
        )


def kv_gib_per_token(model: str) -> float:
    shape, heads = SHAPES.get(model), ENGINE_SHAPES.get(model)
    if shape is None or heads is None:
        raise limits.UnknownModel(
            f"no engine shape for MODEL={model!r} in stack/sizing/gpu_share.py ENGINE_SHAPES and stack/sizing/precision.py "
            "SHAPES: the one-GPU split cannot be computed; add its config.json figures there"
        )
    kv_heads, head_dim = heads
    return 2 * shape.layers * kv_heads * head_dim * ENGINE_DTYPE_BYTES / 2**30


def split(
    card_gib: float,
    model: str,
    token_budget: int,
    max_model_len: int,
    precision: Precision | None = PRODUCTION_PRECISION,
    setting: str = limits.GC_COMPILE,
    profiles=None,
) -> Split:
    """The split for this card, or DoesNotFit naming every figure. `token_budget` 0 (fixed-count micro-batches) is
    planned as one max_model_len sample."""
    profiles = limits.MEASURED if profiles is None else profiles
    profile = profiles.get(model, {}).get(setting)
    if profile is None:
        raise limits.UnknownModel(
            f"no measured memory profile for MODEL={model!r} ({setting}) in stack/sizing/limits.py: the one-GPU split "
            "cannot be derived; run scripts/bench-trainer-gpu for it, or use the two-GPU form"
        )
    profile = limits.with_precision(profile, model, precision)
    tokens = token_budget or max_model_len
    trainer = profile.peak_gib(tokens) + limits.RESERVED_GIB
    weights = SHAPES[model].params * ENGINE_DTYPE_BYTES / 2**30
    kv = kv_gib_per_token(model) * max_model_len
    usable = card_gib * limits.USABLE_FRACTION
    fraction = math.floor((usable - trainer) / card_gib / FRACTION_STEP + 1e-9) * FRACTION_STEP
    out = Split(card_gib, model, tokens, max_model_len, trainer, weights, kv, ENGINE_WORKSPACE_GIB, max(fraction, 0.0))
    need = trainer + out.engine_min_gib
    if out.engine_gib < out.engine_min_gib:
        raise DoesNotFit(
            f"one GPU of {card_gib:.1f} GiB is too small for {model} with engine and trainer on it: "
            f"{card_gib:.1f} x {limits.USABLE_FRACTION:g} usable = {usable:.1f} GiB < {need:.1f} GiB needed "
            f"(trainer {trainer:.1f} GiB at TOKEN_BUDGET={tokens}: {profile.fixed_gib:.1f} fixed + "
            f"{profile.gib_per_1k_tokens:.3f} per 1k tokens + {limits.RESERVED_GIB:g} reserved; engine "
            f"{out.engine_min_gib:.1f} GiB: weights {weights:.1f} + KV cache {kv:.1f} for ENGINE_MAX_MODEL_LEN="
            f"{max_model_len} + workspace {ENGINE_WORKSPACE_GIB:g} (estimate)). Lower TOKEN_BUDGET or "
            "ENGINE_MAX_MODEL_LEN, use a larger card, or the two-GPU form (compose.yaml alone)"
        )
    return out


def env_file(path: str | None) -> dict[str, str]:
    """KEY=VALUE lines of a compose .env file (comments and blanks skipped, one level of quotes removed)."""
    out: dict[str, str] = {}
    if not path:
        return out
    try:
        lines = open(path, encoding="utf-8").read().splitlines()
    except FileNotFoundError:
        return out
    for line in lines:
        key, eq, value = line.strip().partition("=")
        if eq and key and not key.startswith("#"):
            value = value.strip()
            out[key.strip()] = value[1:-1] if len(value) > 1 and value[0] == value[-1] and value[0] in "'\"" else value
    return out


def main(argv: list[str] | None = None) -> int:
    """`python3 -m stack.sizing.gpu_share --card-gib 79.6 [--env-file .env]`: the engine's fraction on stdout, the split's
    line on stderr; or the refusal on stderr and exit 1. MODEL, TOKEN_BUDGET, ENGINE_MAX_MODEL_LEN and TRAIN_DTYPE
    are read as the trainer reads them (stack/readers/trainer.py's fields), from the environment over the .env file."""
    import os

    from stack.backends import WEIGHT_TRANSFERS
    from stack.env import Env, EnvError
    from stack.readers.trainer import FIELDS
    from stack.sizing.precision import choose

    parser = argparse.ArgumentParser(prog="python3 -m stack.sizing.gpu_share", description=__doc__.split("\n\n")[0])
    parser.add_argument("--card-gib", type=float, required=True)
    parser.add_argument("--env-file", default=None)
    args = parser.parse_args(argv)
    read = Env({**env_file(args.env_file), **os.environ})
    # The one-GPU form's transfer (engine and trainer on one device) sets the precision the split is sized for.
    one_gpu = next(entry.name for entry in WEIGHT_TRANSFERS if entry.same_gpu)
    try:
        model, budget = read.get(FIELDS["MODEL"]), read.get(FIELDS["TOKEN_BUDGET"])
        max_len, dtype = read.get(FIELDS["ENGINE_MAX_MODEL_LEN"]), read.get(FIELDS["TRAIN_DTYPE"])
        setting = limits.GC_COMPILE if read.get(FIELDS["TRAINER_COMPILE_LAYERS"]) else limits.GC
        out = split(args.card_gib, model, budget, max_len, choose(one_gpu, dtype), setting)
    except (DoesNotFit, limits.UnknownModel, EnvError, ValueError) as exc:
        print(f"one-gpu: {exc}", file=sys.stderr)
        return 1
    print(f"one-gpu: {out.line()}", file=sys.stderr)
    print(f"{out.engine_fraction:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
