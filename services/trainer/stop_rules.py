"""Stop rules: end a run that is training on nothing, with a checkpoint and one line that says why.

A run can spend a night on rollouts that teach nothing while every service stays up. The seed's
history: two runs lost a night each at 100% forking. Three tells, each read from the trainer's own
per-step metrics, each averaged over the last STOP_WINDOW_STEPS logged steps that carry it:

- forking (`rollout/fork_frac`, TRL's share of turn transitions that started a new training row
  instead of extending the last one). Chained rollouts read 0; a re-rendering engine or template reads
  1. A forked rollout trains each turn as its own row and its memory grows with the square of its turns.
- unscorable (`harbor/unscorable_frac`): rollouts whose sandbox or verifier failed. They leave their
  group's baseline, so a run of nothing else has no signal at all.
- zero spread (`harbor/zero_spread_frac`): groups whose scored rollouts all got the same reward: zero
  advantage, zero gradient.
- stale (`sample/dropped_stale_frac`, trainer/limits.py): samples TRL dropped as older than max_staleness. Half of
  them gone means paying for twice the rollouts, and the dropped ones are each group's last, so the kept
  advantages are no longer zero-mean (trainer/staleness.py).

A rule trips when its window is full and the window's mean is at or above its threshold. The caller
then saves a checkpoint (so the run resumes by name once the cause is fixed) and stops. Windows with no
evidence (no multi-turn rollout, no scored group) neither count nor reset: a short stretch without
evidence must not hide a run that was forking before and after it.

Defaults: a healthy run never trips them (chained rollouts fork 0%; the CPU form's few steps never fill
a window) and a 100%-forked run stops at step STOP_WINDOW_STEPS. Setting a threshold to `off` disables
that rule.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from stack.env import Env, EnvError, Field, Table
from trainer.config import FIELDS as TRAINER_FIELDS


@dataclass(frozen=True)
class Rule:
    name: str  # the setting that holds the threshold
    key: str  # the metric in the trainer's logs
    what: str  # what the figure measures, for the stop line
    fix: str


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
        "shape the reward (REWARD_KEY) or pick tasks the model solves sometimes (README, Reward)",
    ),
    Rule(
        "STOP_STALE_FRAC",
        "sample/dropped_stale_frac",
        "of samples dropped as stale (older than max_staleness)",
        "raise MAX_STALENESS (default auto: 4 x the steps one group spans) or fit a group in fewer steps "
        "(TOKEN_BUDGET, GRADIENT_ACCUMULATION_STEPS); trainer/staleness.py models the rule",
    ),
)

# A threshold is a fraction in (0, 1] or `off`: read as text, parsed by `read` below.
FIELDS = Table(
    Field("STOP_FORKING_FRAC", "text", "0.5", "share of turn transitions forked that stops the run; off: never"),
    Field("STOP_UNSCORABLE_FRAC", "text", "0.9", "share of rollouts unscorable that stops the run; off: never"),
    Field("STOP_ZERO_SPREAD_FRAC", "text", "1.0", "share of zero-spread groups that stops the run; off: never"),
    Field("STOP_STALE_FRAC", "text", "0.5", "share of samples dropped as stale that stops the run; off: never"),
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

    @property
    def line(self) -> str:
        figures = ", ".join(f"{100 * v:.0f}%" for v in self.window)
        return (
            f"trainer: STOPPED by rule {self.rule.name} at step {self.step}: {100 * self.mean:.0f}% "
            f"{self.rule.what} over the last {len(self.window)} steps ({figures}), threshold "
            f"{100 * self.threshold:.0f}%. Checkpoint saved; fix: {self.rule.fix}; then resume with "
            f"RUN_NAME (or set {self.rule.name}=off)"
        )

    def as_status(self) -> dict:
        return {
            "rule": self.rule.name,
            "metric": self.rule.key,
            "step": self.step,
            "mean": round(self.mean, 4),
            "threshold": self.threshold,
            "window": [round(v, 4) for v in self.window],
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
        for rule in RULES:
            threshold = self.thresholds.get(rule.name)
            value = _number(logs.get(rule.key))
            if threshold is None or value is None:
                continue
            seen = self._seen.setdefault(rule.name, deque(maxlen=self.window))
            seen.append(value)
            mean = sum(seen) / len(seen)
            if len(seen) == self.window and mean >= threshold:
                self.tripped = Tripped(rule, step, mean, threshold, tuple(seen))
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
        if not 0.0 < value <= 1.0:
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
