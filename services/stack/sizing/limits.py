"""How long a rollout the trainer's GPU can hold, derived from measured memory, and the startup warning.

Pure (no torch): the trainer, preflight, the benchmark's trajectory shapes and the unit tests on a CPU host
import it.

Why a derivation and not a constant: the loss step's peak memory is, to a very good fit, a fixed part
(weights, gradients, AdamW state, the chunked log-prob workspace) plus a part linear in the packed row's
length (the per-layer checkpoints and one layer's recomputed activations). Both numbers were measured by
`scripts/bench-trainer-gpu` (docs/GPU-BENCHMARK.md); the step limit then follows from how many tokens one
agent turn adds (`TurnSizes`), because a chained rollout is one training sample and TRL drops, with a
warning, any sample longer than `token_budget`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from stack.sizing.precision import SHAPES, Precision, master_weight_cost

# --- what one mini-swe-agent rollout costs in tokens -------------------------------------------------------------
#
# Measured in characters from mini-swe-agent 2.4.6's default config (minisweagent/config/mini.yaml, the tool-call
# form the stack runs) and scaled by CHARS_PER_TOKEN, because the Qwen tokenizer cannot be downloaded here:
#   system_template 63 chars, instance_template 2,914 chars without its placeholders, the `bash` tool schema 243
#   chars of JSON; Qwen3's chat template adds ~500 chars of tool-calling instructions around it.
#   The task text is an assumption: 6,000 chars, a SWE-bench-sized issue (the starter tasks are ~140 chars).
# Per turn: a tool-call completion of 100-300 tokens (reasoning + one bash call) and a tool output of 200-1,500
# tokens (mini-swe-agent truncates outputs over 10,000 chars to head+tail, ~2,900 tokens, so 1,500 is not a cap),
# plus the chat template's per-message framing. Replace these with real captures once the CPU form writes them.
CHARS_PER_TOKEN = 3.5  # Qwen's 151k BPE on English prose + code; stated assumption, not measured here
TEMPLATE_CHARS = 63 + 2914 + 243 + 500
TASK_CHARS = 6000
MESSAGE_OVERHEAD_TOKENS = 12  # <|im_start|>role\n ... <|im_end|>\n, <tool_call>/<tool_response> tags


@dataclass(frozen=True)
class TurnSizes:
    """Token sizes of one agent rollout: a prompt, then per step a completion and a tool output."""

    template_tokens: int = round(TEMPLATE_CHARS / CHARS_PER_TOKEN)  # shared by every task
    task_tokens: int = round(TASK_CHARS / CHARS_PER_TOKEN)
    completion_tokens: tuple[int, int] = (100, 300)  # (min, max) per turn
    observation_tokens: tuple[int, int] = (200, 1500)
    message_overhead_tokens: int = MESSAGE_OVERHEAD_TOKENS

    def __post_init__(self):
        for name in ("completion_tokens", "observation_tokens"):
            low, high = getattr(self, name)
            if not 0 < low <= high:
                raise ValueError(f"TurnSizes.{name}={(low, high)} must be (min, max) with 0 < min <= max")

    @property
    def prompt_tokens(self) -> int:
        return self.template_tokens + self.task_tokens + self.message_overhead_tokens

    def turn_tokens(self, planning: str = "max") -> int:
        """Tokens one step adds to a chained sample: its completion and the tool output that follows."""
        pick = {"max": max, "mean": lambda pair: sum(pair) / 2}[planning]
        return math.ceil(
            pick(self.completion_tokens) + pick(self.observation_tokens) + 2 * self.message_overhead_tokens
        )

    def rollout_tokens(self, step_limit: int, planning: str = "max") -> int:
        """Length of the chained sample of a rollout that used all `step_limit` model calls.

        The last step's tool output is not part of any sample (no later model call saw it), so a rollout of S
        steps is the prompt, S completions and S-1 tool outputs.
        """
        if step_limit < 1:
            raise ValueError(f"step_limit={step_limit}: a rollout has at least one model call")
        pick = {"max": max, "mean": lambda pair: sum(pair) / 2}[planning]
        last_observation = pick(self.observation_tokens) + self.message_overhead_tokens
        return self.prompt_tokens + step_limit * self.turn_tokens(planning) - math.floor(last_observation)

    def max_steps_within(self, tokens: int, planning: str = "max") -> int:
        """The largest step limit whose full rollout is at most `tokens` long (0 if not even one step fits)."""
        steps = 0
        while self.rollout_tokens(steps + 1, planning) <= tokens:
            steps += 1
        return steps


DEFAULT_TURNS = TurnSizes()


# --- measured memory ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MemoryProfile:
    """Peak memory of TRL AsyncGRPO's loss step (forward, backward, clip, AdamW) as fixed + slope x packed tokens.

    Fitted to the allocator's RESERVED peak (what an OOM is decided on), as an upper envelope: the line lies on or
    above every measured point. Valid for rows of chained rollouts, which is what this stack trains. A forked row
    (each turn a sample repeating its prefix) costs more than its packed length says: TRL's tree attention gathers
    every segment's whole root-to-segment K/V path, so memory follows the RAW (unfolded) tokens too, and
    `token_budget`, which counts unique tokens, does not bound it. `gib_per_1k_forked_raw` is that extra.
    """

    fixed_gib: float
    gib_per_1k_tokens: float
    measured_on: str
    largest_measured_tokens: int
    gib_per_1k_forked_raw: float = 0.0
    settings: Mapping[str, str] = field(default_factory=dict)
    dtype: str = "bfloat16"  # weights, gradients and AdamW state when measured
    computed: str = ""  # what was added by arithmetic, not measured (precision.master_weight_cost)

    def peak_gib(self, packed_tokens: int, raw_tokens: int | None = None) -> float:
        forked = 0.0 if raw_tokens is None else self.gib_per_1k_forked_raw * raw_tokens / 1000
        return self.fixed_gib + self.gib_per_1k_tokens * packed_tokens / 1000 + forked


# scripts/bench-trainer-gpu on one NVIDIA H200 (139.8 GiB), torch 2.11, transformers 5.17.0, trl 1.16.0, bf16 weights
# and AdamW state, PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True; docs/GPU-BENCHMARK.md has the table. Keyed by
# MODEL, then by the trainer's activation setting. A model that is not here gets no derived limit: benchmark it.
GC_COMPILE = "gc+compile"  # gradient checkpointing on every layer + regional torch.compile of the decoder layers
GC = "gc"  # gradient checkpointing on every layer, eager (TRL's default)
MEASURED: dict[str, dict[str, MemoryProfile]] = {
    "Qwen/Qwen3-1.7B": {
        # reserved peaks 14.1 GiB at 8k ... 86.7 GiB at 381k packed tokens
        GC_COMPILE: MemoryProfile(
            fixed_gib=12.5,
            gib_per_1k_tokens=0.200,
            measured_on="NVIDIA H200",
            largest_measured_tokens=381_402,
            gib_per_1k_forked_raw=0.035,  # measured eager (58-step forked rollout: 96 GiB at 79k packed tokens)
            settings={"gradient_checkpointing": "every layer", "compile": "decoder layers, inductor, dynamic"},
        ),
        # reserved peaks 14.1 GiB at 8k ... 75.7 GiB at 255k packed tokens
        GC: MemoryProfile(
            fixed_gib=12.1,
            gib_per_1k_tokens=0.253,
            measured_on="NVIDIA H200",
            largest_measured_tokens=254_626,
            gib_per_1k_forked_raw=0.035,
            settings={"gradient_checkpointing": "every layer", "compile": "off"},
        ),
    },
}


# Never plan to the last byte: the CUDA context, NCCL buffers for the weight transfer and allocator slack live
# outside the reserved peak torch reports.
RESERVED_GIB = 4.0
USABLE_FRACTION = 0.92
# Budgets are rounded down to this: TRL's rows are sized in tokens, and a round number reads as a setting.
BUDGET_QUANTUM = 1024


def with_precision(profile: MemoryProfile, model: str, precision: Precision | None) -> MemoryProfile:
    """The profile for training in `precision`: measured in bfloat16, a float32 master copy adds what
    `precision.master_weight_cost` computes (not measured; docs/GPU-BENCHMARK.md)."""
    if precision is None or (precision.weights == profile.dtype and not precision.autocast):
        return profile
    shape = SHAPES.get(model)
    if shape is None:
        raise UnknownModel(
            f"no parameter shape for MODEL={model!r} in stack/sizing/precision.py SHAPES: the memory of "
            f"{precision.describe()} cannot be computed from the {profile.dtype} measurement"
        )
    cost = master_weight_cost(shape, precision, profile.dtype)
    return dataclasses.replace(
        profile,
        fixed_gib=profile.fixed_gib + cost.fixed_gib,
        gib_per_1k_tokens=profile.gib_per_1k_tokens + cost.gib_per_1k_tokens,
        dtype=precision.weights,
        computed=f"+{cost.fixed_gib:.1f} GiB fixed and +{cost.gib_per_1k_tokens:.3f} GiB per 1k tokens computed, "
        f"not measured, for {precision.describe()}",
    )


@dataclass(frozen=True)
class Limits:
    card_gib: float
    model: str
    max_packed_tokens: int  # the longest row the loss step fits on this card (never beyond the longest measured)
    token_budget: int  # TOKEN_BUDGET to set: max_packed_tokens, capped by the engine's max_model_len if given
    max_step_limit: int  # every turn at its largest size still fits in token_budget
    typical_step_limit: int  # turns of average size fit
    profile: MemoryProfile
    max_sample_tokens: int  # the longest one sample can be: token_budget, or max_model_len when smaller
    bound_by: str  # what caps the step limit: "memory" or "max_model_len" (the engine rejects longer contexts)


class UnknownModel(LookupError):
    pass


def derive_limits(
    card_gib: float,
    model: str,
    turns: TurnSizes = DEFAULT_TURNS,
    profiles: Mapping[str, Mapping[str, MemoryProfile]] | None = None,
    max_model_len: int | None = None,
    setting: str = GC_COMPILE,
    precision: Precision | None = None,
) -> Limits:
    """From the card's memory and the model's measured profile to (max packed tokens, step limit, token budget).

    `token_budget` may exceed one rollout: TRL packs several samples into a row up to it, which is what keeps the
    GPU busy. It is capped by `max_model_len` only in the sense that no sample is ever longer, so the step limit is
    bounded by both.
    """
    profiles = MEASURED if profiles is None else profiles
    if card_gib <= 0:
        raise ValueError(f"card_gib={card_gib}: give the trainer GPU's memory in GiB (e.g. 79.6 for an 80 GB card)")
    profile = profiles.get(model, {}).get(setting)
    if profile is None:
        known = ", ".join(f"{m} ({'/'.join(sorted(s))})" for m, s in sorted(profiles.items())) or "none"
        raise UnknownModel(
            f"no measured memory profile for MODEL={model!r} with {setting!r} (measured: {known}); run "
            "scripts/bench-trainer-gpu with that model's config and add its line to stack/sizing/limits.py"
        )
    profile = with_precision(profile, model, precision)
    usable = card_gib * USABLE_FRACTION - RESERVED_GIB - profile.fixed_gib
    # The fit is linear to the longest row measured; past it nothing was observed, so nothing is promised.
    max_packed = max(0, min(int(usable / profile.gib_per_1k_tokens * 1000), profile.largest_measured_tokens))
    budget = max_packed // BUDGET_QUANTUM * BUDGET_QUANTUM
    longest_sample = budget if max_model_len is None else min(budget, max_model_len)
    bound_by = "max_model_len" if longest_sample < budget else "memory"
    return Limits(
        card_gib=card_gib,
        model=model,
        max_packed_tokens=max_packed,
        token_budget=budget,
        max_step_limit=turns.max_steps_within(longest_sample, "max"),
        typical_step_limit=turns.max_steps_within(longest_sample, "mean"),
        profile=profile,
        max_sample_tokens=longest_sample,
        bound_by=bound_by,
    )


def startup_report(
    limits: Limits,
    step_limit: int,
    token_budget: int | None,
    turns: TurnSizes = DEFAULT_TURNS,
) -> tuple[list[str], list[str]]:
    """(info lines, warning lines) for the trainer's startup log. Empty warnings mean the configuration is safe."""
    info = [
        f"trainer memory: {limits.model} on a {limits.card_gib:.0f} GiB card fits packed rows of up to "
        f"{limits.max_packed_tokens} tokens ({limits.profile.fixed_gib:.1f} GiB fixed + "
        f"{limits.profile.gib_per_1k_tokens:.3f} GiB per 1k tokens: measured in bfloat16 on {limits.profile.measured_on}"
        + (f"; {limits.profile.computed})" if limits.profile.computed else ")"),
        f"trainer memory: largest safe AGENT_STEP_LIMIT={limits.max_step_limit} (every turn at its largest size; "
        f"{limits.typical_step_limit} with average turns; bound by {limits.bound_by}), largest safe "
        f"TOKEN_BUDGET={limits.token_budget}",
    ]
    warnings = []
    worst = turns.rollout_tokens(step_limit, "max")
    if step_limit > limits.max_step_limit:
        warnings.append(
            f"AGENT_STEP_LIMIT={step_limit} exceeds the safe limit {limits.max_step_limit}: a rollout that uses every "
            f"step can reach ~{worst} tokens and "
            + (
                "outgrow the engine's max_model_len (the agent's next call fails)"
                if limits.bound_by == "max_model_len"
                else f"is dropped by TRL for exceeding TOKEN_BUDGET={token_budget} (counted as batch/dropped_oversize)"
                if token_budget and worst > token_budget
                else "its loss step can run out of GPU memory"
            )
            + f"; set AGENT_STEP_LIMIT<={limits.max_step_limit}"
        )
    if token_budget is not None and token_budget > limits.max_packed_tokens:
        warnings.append(
            f"TOKEN_BUDGET={token_budget} is above the {limits.max_packed_tokens} packed tokens this card fits "
            f"(peak ~{limits.profile.peak_gib(token_budget):.0f} GiB of {limits.card_gib:.0f}): a full row can run "
            f"out of memory; set TOKEN_BUDGET<={limits.token_budget}"
        )
    elif token_budget is not None and 0 < token_budget < min(worst, limits.max_sample_tokens):
        warnings.append(
            f"TOKEN_BUDGET={token_budget} is shorter than a full {step_limit}-step rollout "
            f"(~{min(worst, limits.max_sample_tokens)} tokens): TRL "
            f"drops such samples (batch/dropped_oversize); raise TOKEN_BUDGET toward {limits.token_budget} or lower "
            f"AGENT_STEP_LIMIT to {turns.max_steps_within(token_budget, 'max')}"
        )
    return info, warnings
