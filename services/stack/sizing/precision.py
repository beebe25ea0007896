"""Which dtype the trainer holds its weights and AdamW state in, and which dtype it computes in.

WHY a float32 master copy with bfloat16 compute on the GPU (TRL 1.16.0's own default: `AsyncGRPOConfig.dtype`
"float32" with `bf16=True`, i.e. float32 parameters and AdamW state, the forward and backward under bfloat16
autocast): with bfloat16 PARAMETERS and a single process there is no float32 copy anywhere, and AdamW's step at the
default LEARNING_RATE=1e-6 (about lr per element on the first steps, |m/sqrt(v)| ~ 1) is below half a bfloat16 ulp
of almost every weight. Round-to-nearest then writes the old value back: for a N(0, 0.02) matrix the ulp is ~1.2e-4,
so only weights smaller than ~2.6e-4 in magnitude (about 1% of them) can change, and a norm gain (1.0, ulp 7.8e-3)
never does. The loss and reward curves can look alive while the model stays put. A float32 weight moves for any step
above ~6e-8 x |w|. The alternatives (a bfloat16 optimizer with stochastic rounding or Kahan summation) need an
optimizer outside the pinned set (torchao); TRL supports this one without code of ours.

What it costs on the card (`master_weight_cost`): 8 more bytes per parameter fixed (float32 weights + gradients
instead of bfloat16: +2 +2; AdamW's two moments follow the parameter dtype: +2 +2), plus the residual stream in
float32 under autocast (the embedding output is float32 and every residual add promotes), which doubles the per-layer
activation checkpoints that gradient checkpointing keeps per token.

The weights sent to the engine are float32 as well (TRL's manifest takes each parameter's dtype); vLLM serves
bfloat16 and casts on load, and TRL logs one warning about the mismatch at train start (read at trl 1.16.0,
weight_transfer.py `init_weight_transfer`). The mock engine of the CPU form serves float32, so the CPU form keeps
float32 everywhere with no autocast.
"""

from __future__ import annotations

from dataclasses import dataclass

from stack.backends import WEIGHT_TRANSFERS

DTYPES = ("bfloat16", "float16", "float32")
BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
# A bfloat16 weight of this size or more does not move at this learning rate (half an ulp of 2**e is 2**(e-8)).
BF16_MANTISSA_BITS = 7


@dataclass(frozen=True)
class Precision:
    weights: str  # parameters, gradients and AdamW state (TRL's `dtype`)
    compute: str  # "bfloat16" under autocast (TRL's `bf16=True`), or the weights' own dtype

    @property
    def autocast(self) -> bool:
        return self.compute != self.weights

    def trl_kwargs(self) -> dict:
        """What AsyncGRPOConfig takes: `dtype` loads the model, `bf16`/`fp16` turn on autocast."""
        return {"dtype": self.weights, "bf16": self.compute == "bfloat16", "fp16": self.compute == "float16"}

    def describe(self) -> str:
        if self.autocast:
            return f"{self.weights} weights and AdamW state, {self.compute} compute (autocast)"
        return f"{self.weights} weights, AdamW state and compute"


def choose(weight_transfer: str, weights: str) -> Precision:
    """GPU (nccl, ipc: into vLLM): bfloat16 compute, what vLLM serves. CPU form (mock): no autocast; the mock serves
    float32."""
    if weights not in DTYPES:
        raise ValueError(f"TRAIN_DTYPE={weights!r}: choose one of {', '.join(DTYPES)}")
    if WEIGHT_TRANSFERS.get(weight_transfer).serves_bfloat16 and weights == "float32":
        return Precision(weights="float32", compute="bfloat16")
    return Precision(weights=weights, compute=weights)


def smallest_stuck_weight(weights: str, learning_rate: float) -> float | None:
    """The weight magnitude from which one AdamW step of size `learning_rate` rounds back to the old value
    (round-to-nearest: a step below half an ulp), or None for float32, where it is beyond any trained weight."""
    if weights == "float32":
        return None
    mantissa = BF16_MANTISSA_BITS if weights == "bfloat16" else 10
    # |w| in [2**e, 2**(e+1)) has ulp 2**(e - mantissa); stuck when lr < ulp / 2, i.e. |w| >= lr * 2**(mantissa + 1).
    return learning_rate * 2 ** (mantissa + 1)


def warning(precision: Precision, learning_rate: float) -> str | None:
    """One line when the weights cannot move at this learning rate, else None."""
    stuck = smallest_stuck_weight(precision.weights, learning_rate)
    if stuck is None or stuck >= 1.0:
        return None
    return (
        f"TRAIN_DTYPE={precision.weights} with LEARNING_RATE={learning_rate:g}: an AdamW step rounds back to the old "
        f"value for every weight of magnitude >= {stuck:.2g} (most of a 0.02-scale matrix, every norm gain), so the "
        "model barely moves; set TRAIN_DTYPE=float32 (float32 master weights, bfloat16 compute on the GPU)"
    )


# --- what the master copy costs on the card ----------------------------------------------------------------------


@dataclass(frozen=True)
class ModelShape:
    params: int
    hidden: int
    layers: int


# Qwen3-1.7B's config.json: hidden_size 2048, 28 layers, intermediate 6144, 16 q / 8 kv heads of 128, vocab 151936,
# tied embeddings. Parameters: 151936*2048 embedding + 28 * (2048*2048*2 [q,o] + 2048*1024*2 [k,v] + 3*2048*6144 [mlp]
# + 2*2048 + 2*128 [norms]) + 2048 = 1,720,574,976.
SHAPES = {"Qwen/Qwen3-1.7B": ModelShape(params=1_720_574_976, hidden=2048, layers=28)}


@dataclass(frozen=True)
class Cost:
    fixed_gib: float  # added to the measured fixed part
    gib_per_1k_tokens: float  # added to the measured slope


def master_weight_cost(shape: ModelShape, precision: Precision, measured_in: str = "bfloat16") -> Cost:
    """Computed (not measured) extra memory of `precision` over a profile measured with all-`measured_in` training.

    Fixed: parameters, gradients and AdamW's two moments all take the weights' dtype (torch AdamW's state is
    zeros_like(param)), 4 tensors per parameter. Per token: gradient checkpointing keeps every layer's input (the
    residual stream, `hidden` values per token per layer) in the residual stream's dtype, which is the weights' dtype
    (float32 under autocast: the embedding output and every residual add are float32). One layer's recomputed
    activations are mostly autocast outputs (bfloat16) and are not counted here. Under autocast, the forward also
    holds a `compute`-dtype copy of every weight (autocast's cast cache, freed when the forward's autocast context
    exits); counted in full, as an upper bound, because it can coincide with the forward's peak.
    """
    extra = BYTES[precision.weights] - BYTES[measured_in]
    cast_cache = BYTES[precision.compute] if precision.autocast else 0
    fixed = (4 * extra + cast_cache) * shape.params / 2**30
    per_1k = extra * shape.hidden * shape.layers * 1000 / 2**30
    return Cost(fixed_gib=fixed, gib_per_1k_tokens=per_1k)
