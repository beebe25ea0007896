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
- stale (`sample/dropped_stale_frac`, trainer/watch/dropped_samples.py): samples TRL dropped as older than max_staleness. Half of
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

The rules and their settings (each threshold, the window, STOP_MISMATCH_KL's default and why) are read by
stack/readers/stop_rules.py, which preflight checks them with too; this module watches a run by them.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from stack.env import EnvError
from stack.readers import stop_rules as settings
from stack.readers.stop_rules import DEFAULT_WINDOW, RULES, Rule
from trainer.watch import summary_log


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


def read(env: Mapping[str, str] | None = None) -> tuple[StopRules, list[str]]:
    thresholds, window, bad = settings.read(env)
    return StopRules(thresholds, window), bad


def from_env(env: Mapping[str, str] | None = None) -> StopRules:
    rules, bad = read(env)
    if bad:
        raise EnvError(bad)
    return rules
