"""Stop rules: end a run that is training on nothing, with a checkpoint and one line that says why.

A run can spend a night on rollouts that teach nothing while every service stays up. The seed's
history: two runs lost a night each at 100% forking. The tells, each read from the trainer's own
per-step metrics over the last STOP_WINDOW_STEPS logged steps that carry it:

- forking (`rollout/fork_frac`, TRL's share of turn transitions that started a new training row
  instead of extending the last one). Chained rollouts read 0; a re-rendering engine or template reads
  1. A forked rollout trains each turn as its own row and its memory grows with the square of its turns.
  An agent's dropped-reply retry (a format error: the next call resends the conversation without the rejected
  reply) forks too, by design; trainer/rollouts/retries.py moves those out of the tally before TRL computes the figure.
- unscorable (`harbor/unscorable_frac`): rollouts whose sandbox or verifier failed. They leave their
  group's baseline, so a run of nothing else has no signal at all.
- zero spread (`harbor/zero_spread_frac`): groups whose scored rollouts all got the same reward: zero
  advantage, zero gradient.
- stale (`sample/dropped_stale_frac`, trainer/device/limits.py): samples TRL dropped as older than max_staleness. Half of
  them gone means paying for twice the rollouts, and the dropped ones are each group's last, so the kept
  advantages are no longer zero-mean (trainer/rollouts/staleness.py).
- mismatch (`mismatch/kl_mean`, trainer/watch/mismatch.py): the mean KL between the engine's and the trainer's logprobs
  of the tokens being trained. A run whose engine serves other weights, another dtype or raw logprobs trains on
  importance ratios that are noise; its threshold is a KL in nats, not a fraction.

A fraction's rule trips when its window is full and the window's mean is at or above its threshold. The KL rule
trips when its window is full and EVERY step in it is at or above its threshold: a KL is unbounded and heavy-tailed
(one broken sample can put a step at whole nats), so one step of 0.1 would carry a 5-step mean to 0.02 on its own,
while the defects it is for (wrong weights served, wrong dtype, wrong logprobs mode) hold on every step. The caller
then saves a checkpoint (so the run resumes by name once the cause is fixed) and stops. Windows with no
evidence (no multi-turn rollout, no scored group) neither count nor reset: a short stretch without
evidence must not hide a run that was forking before and after it.

Defaults: a healthy run never trips them (chained rollouts fork 0%; the CPU form's few steps never fill
a window) and a 100%-forked run stops at step STOP_WINDOW_STEPS. Setting a threshold to `off` disables
that rule.

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
from dataclasses import dataclass, field

from stack.env import Env, EnvError, Field, Table
from stack.readers.trainer import FIELDS as TRAINER_FIELDS
from trainer.watch import summary_log


@dataclass(frozen=True)
class Rule:
    name: str  # the setting that holds the threshold
    key: str  # the metric in the trainer's logs
    what: str  # what the figure measures, for the stop line
    fix: str
    # "fraction": a share in (0, 1], shown in %, bounded by the window's mean; "nats": a KL, any positive number,
    # bounded by every step of the window (module docstring).
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


@dataclass(frozen=True)
class Tripped:
    rule: Rule
    step: int
    mean: float
    threshold: float
    window: tuple[float, ...]
    context: tuple[tuple[str, float | None], ...] = ()  # the rule's context figures at the tripping step

    @property
    def line(self) -> str:
        rule, figure, n = self.rule, self.rule.figure, len(self.window)
        figures = ", ".join(figure(v) for v in self.window)
        if rule.kind == "fraction":
            what = (
                f"{figure(self.mean)} {rule.what} over the last {n} steps ({figures}), "
                f"threshold {figure(self.threshold)}"
            )
        else:
            context = ", ".join(f"{label} {'?' if v is None else f'{v:.3g}'}" for label, v in self.context)
            what = (
                f"{rule.what} at or above {figure(self.threshold)} in each of the last {n} steps ({figures}"
                + (f"; at step {self.step}: {context}" if context else "")
                + ")"
            )
        return (
            f"trainer: STOPPED by rule {rule.name} at step {self.step}: {what}. Checkpoint saved; fix: {rule.fix}; "
            f"then resume with RUN_NAME (or set {rule.name}=off)"
        )

    def as_status(self) -> dict:
        return {
            "rule": self.rule.name,
            "metric": self.rule.key,
            "step": self.step,
            # 6 places: a KL rule's figures are thousandths (a fraction's lose nothing either).
            "mean": round(self.mean, 6),
            "threshold": self.threshold,
            "window": [round(v, 6) for v in self.window],
            "context": {label: value for label, value in self.context},
            "message": self.line,
        }


def _number(value) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


@dataclass
class StopRules:
    thresholds: dict[str, float]  # rule name -> threshold; a disabled rule is absent
    window: int = DEFAULT_WINDOW
    _seen: dict[str, deque] = field(default_factory=dict)
    tripped: Tripped | None = None

    def observe(self, step: int, logs: Mapping) -> Tripped | None:
        """Feed one logged step; the first rule that trips (and stays tripped), else None."""
        if self.tripped:
            return self.tripped
        if summary_log.is_summary(
            logs
        ):  # after the last step, of groups never trained on (trainer/watch/summary_log.py)
            return None
        for rule in RULES:
            threshold = self.thresholds.get(rule.name)
            value = _number(logs.get(rule.key))
            if threshold is None or value is None:
                continue
            seen = self._seen.setdefault(rule.name, deque(maxlen=self.window))
            seen.append(value)
            if len(seen) == self.window and rule.trips(seen, threshold):
                context = tuple((label, _number(logs.get(key))) for label, key in rule.context)
                self.tripped = Tripped(rule, step, sum(seen) / len(seen), threshold, tuple(seen), context)
                return self.tripped
        return None

    def describe(self) -> str:
        rules = ", ".join(f"{name}={value:g}" for name, value in self.thresholds.items()) or "all off"
        return f"stop rules over {self.window} steps: {rules}"

    def callback(self):
        """A transformers `TrainerCallback`: on the step whose log trips a rule, ask the Trainer to save a
        checkpoint and stop. transformers 5.17's `_maybe_log_save_evaluate` saves right after `on_log`
        when `control.should_save` is set, and the training loop ends after that step."""
        from transformers import TrainerCallback

        rules = self

        class _StopRulesCallback(TrainerCallback):
            def on_log(self, args, state, control, logs=None, **kwargs):
                if logs is not None and rules.observe(state.global_step, logs):
                    control.should_save = True
                    control.should_training_stop = True

        return _StopRulesCallback()


def problems(env: Mapping[str, str] | None = None) -> list[str]:
    """Every bad stop-rule setting, one line each, naming the fix (preflight prints them all at once)."""
    return read(env)[1]


def read(env: Mapping[str, str] | None = None) -> tuple[StopRules, list[str]]:
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
    return StopRules(thresholds, window), r.problems


def from_env(env: Mapping[str, str] | None = None) -> StopRules:
    rules, bad = read(env)
    if bad:
        raise EnvError(bad)
    return rules
