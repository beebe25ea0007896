"""The stop rules' settings (STOP_*): each rule's threshold or `off`, and the window they average over, read as the
trainer reads them (trainer/watch/stop_rules.py says what each rule measures and when it trips); preflight checks
them with this same reader, before the engine is paid for.

STOP_MISMATCH_KL's default, 0.02 nats. prime-rl's nightly CI gates fully on-policy runs at a mean mismatch KL of
0.005 for most models and 0.01-0.02 for two MoE ones (PrimeIntellect-ai/prime-rl, tests/nightly/test_mismatch_kl.py:
budgets a few times above what it measured on H200s); slime/SGLang report k3 mismatch of 1e-5..1e-3 on dense models
and 1e-3..1e-1 on MoE. Ours also carries the policy's drift over the samples' staleness (up to MAX_STALENESS steps,
16 at the defaults; trainer/watch/mismatch.py), so the bound sits at the top of prime-rl's range rather than at its 0.005.
At 0.02 the typical trained token is at TRL's clip boundary (epsilon 0.2: k3 at ratio 0.8 is 0.023, at 1.2 0.018):
past it the clipped objective drops the mean token's gradient, and the run trains on little however healthy the rest
looks. The defects the rule is for sit far above: other weights or an off-by-one token alignment put typical tokens
a nat or more apart (k3 of a 1-nat gap: 0.72 or 0.37).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

from stack.env import Env, Field, Table
from stack.readers.trainer import FIELDS as TRAINER_FIELDS


@dataclass(frozen=True)
class Rule:
    name: str  # the setting that holds the threshold
    key: str  # the metric in the trainer's logs
    what: str  # what the figure measures, for the stop line
    fix: str
    # "fraction": a share in (0, 1], shown in %, bounded by the window's mean; "nats": a KL, any positive number,
    # bounded by every step of the window (trainer/watch/stop_rules.py's docstring).
    kind: str = "fraction"
    # Figures of the tripping step shown beside the window, (label, logs key): what tells the causes apart.
    context: tuple[tuple[str, str], ...] = ()

    def figure(self, value: float) -> str:
        return f"{100 * value:.0f}%" if self.kind == "fraction" else f"{value:.3g}"

    def trips(self, window: deque, threshold: float) -> bool:
        if self.kind == "fraction":
            return sum(window) / len(window) >= threshold
        return min(window) >= threshold


RULES = (
    Rule(
        "STOP_FORKING_FRAC",
        "rollout/fork_frac",
        "of turn transitions forked (re-rendered prompts)",
        "the engine or chat template re-renders what it sampled: check the engine's capture level "
        "(scripts/status) and the chat template (REASONING_PARSER, CHAT_TEMPLATE_KWARGS)",
    ),
    Rule(
        "STOP_UNSCORABLE_FRAC",
        "harbor/unscorable_frac",
        "of rollouts unscorable (sandbox or verifier failed)",
        "see why sandboxes fail: docker compose logs env-server; scripts/status",
    ),
    Rule(
        "STOP_ZERO_SPREAD_FRAC",
        "harbor/zero_spread_frac",
        "of groups with zero reward spread (no gradient)",
        "shape the reward (REWARD_KEY) or pick tasks the model solves sometimes (services/trainer/README.md, Reward)",
    ),
    Rule(
        "STOP_STALE_FRAC",
        "sample/dropped_stale_frac",
        "of samples dropped as stale (older than max_staleness)",
        "raise MAX_STALENESS (default auto: 4 x the steps one group spans) or fit a group in fewer steps "
        "(TOKEN_BUDGET, GRADIENT_ACCUMULATION_STEPS); trainer/rollouts/staleness.py models the rule",
    ),
    Rule(
        "STOP_MISMATCH_KL",
        "mismatch/kl_mean",
        "mean KL (nats) between the engine's and the trainer's logprobs of the trained tokens",
        "the engine does not score tokens as the trainer does: check that weight pushes land "
        "(weights/engine_version_lag on the dashboard), that the engine serves MODEL with ENGINE_DTYPE matching the "
        "trainer's compute (bfloat16 on the GPU) and processed logprobs (scripts/status: capture level); a KL that "
        "follows staleness is policy drift: lower MAX_STALENESS or LEARNING_RATE",
        kind="nats",
        context=(("max |logprob diff|", "mismatch/logprob_absdiff_max"), ("staleness", "sample/staleness_mean")),
    ),
)

# A threshold is a fraction in (0, 1] or `off`: read as text, parsed by `read` below.
FIELDS = Table(
    Field("STOP_FORKING_FRAC", "text", "0.5", "share of turn transitions forked that stops the run; off: never"),
    Field("STOP_UNSCORABLE_FRAC", "text", "0.9", "share of rollouts unscorable that stops the run; off: never"),
    Field("STOP_ZERO_SPREAD_FRAC", "text", "1.0", "share of zero-spread groups that stops the run; off: never"),
    Field("STOP_STALE_FRAC", "text", "0.5", "share of samples dropped as stale that stops the run; off: never"),
    Field(
        "STOP_MISMATCH_KL",
        "text",
        "0.02",
        "mean engine-vs-trainer logprob KL (nats) on the trained tokens that stops the run; off: never",
    ),
    Field(
        "STOP_WINDOW_STEPS",
        "integer",
        5,
        "logged steps each rule averages over",
        fix="set it in .env to a whole number of steps >= 1, e.g. STOP_WINDOW_STEPS=5 (the logged steps each rule "
        "averages over)",
        minimum=1,
    ),
)
DEFAULT_WINDOW = FIELDS["STOP_WINDOW_STEPS"].default


def problems(env: Mapping[str, str] | None = None) -> list[str]:
    """Every bad stop-rule setting, one line each, naming the fix (preflight prints them all at once)."""
    return read(env)[2]


def read(env: Mapping[str, str] | None = None) -> tuple[dict[str, float], int, list[str]]:
    """(threshold of each rule that is on, window, every problem): what trainer/watch/stop_rules.py builds its
    StopRules from."""
    r = Env(env, collect=True)
    thresholds = {}
    for rule in RULES:
        f = FIELDS[rule.name]
        raw = r.get(f)
        if raw.lower() == "off":
            continue
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        if rule.kind == "nats" and not 0.0 < value < math.inf:
            r.refuse(
                f"{rule.name}={raw!r} must be a positive number of nats (default {f.default}) or 'off': "
                f"set it in .env, e.g. {rule.name}={f.default} (the {rule.what} that stops the run when "
                f"every step of the window reaches it), or {rule.name}=off to disable the rule",
                None,
            )
            continue
        if rule.kind == "fraction" and not 0.0 < value <= 1.0:
            r.refuse(
                f"{rule.name}={raw!r} must be a fraction in (0, 1] (default {f.default}) or 'off': "
                f"set it in .env, e.g. {rule.name}={f.default} (the share {rule.what} that stops the "
                f"run), or {rule.name}=off to disable the rule",
                None,
            )
            continue
        thresholds[rule.name] = value
    window = r.get(FIELDS["STOP_WINDOW_STEPS"])
    # The trainer logs every step (train.py, logging_steps=1), so a run logs at most MAX_STEPS steps: a
    # window set longer never fills and no rule can ever fire. The default window may outlast a short run
    # (the CPU form's 2 steps): the rules are simply not armed there. A bad MAX_STEPS is trainer-settings'
    # line (read here with its own reader, its problems left to it).
    max_steps = Env(r.env, collect=True).get(TRAINER_FIELDS["MAX_STEPS"])
    if thresholds and r.raw("STOP_WINDOW_STEPS") and window > max_steps:
        window = r.refuse(
            f"STOP_WINDOW_STEPS={window} is longer than the run (MAX_STEPS={max_steps}), so the window never fills "
            f"and no stop rule can fire: set STOP_WINDOW_STEPS to at most {max_steps} (default {DEFAULT_WINDOW}), "
            f"or turn the rules off ({' '.join(f'{rule.name}=off' for rule in RULES)})",
            window,
        )
    return thresholds, window, r.problems
