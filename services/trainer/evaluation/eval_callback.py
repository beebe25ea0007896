"""Periodic evaluation during training (EVAL_STEPS), with the engine's live weights.

TRL 1.16.0's AsyncGRPOTrainer has no evaluation loop of its own (no eval_dataset; its `log()` only
prefixes metrics when the model is in eval mode), and the rollouts it trains on run in a spawned worker
process. What it does offer is the Trainer callback chain, in which its own `_sync_weight` runs at
`on_step_end` (StepIntervalCallback). This callback therefore evaluates in `on_log`, which the
Trainer calls after `on_step_end`: by then the engine serves exactly step N's weights, and the eval
numbers land in the same `logs` dict, so trackio/tensorboard and status.json get them at step N. It is
inserted first in the callback list so every logger after it sees the `eval/*` keys.

The evaluation BLOCKS the optimizer for its duration, on purpose: the weights stay pinned to step N
while it runs (a background evaluation would straddle weight syncs and measure a mix of policies).
The rollout worker keeps sampling training groups meanwhile, so the engine does not idle. Cost: one
evaluation's wall time every EVAL_STEPS steps; size it with EVAL_MAX_TASKS and EVAL_CONCURRENCY.
At the LAST step the worker is stopped first: its groups would never be trained, and they took sandboxes (E2B's
paid seconds) and engine time from the evaluation (in the CPU learn form, its 48 rollouts shared the 2 cores with
training groups nobody read).
A failed evaluation is reported in status and the log, never fatal to the run.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from ..watch.engine_gone import EngineGone
from .evaluate import evaluate, headline, write_report


def eval_metrics(doc: dict) -> dict[str, float]:
    out = {"eval/unscorable_frac": doc["unscorable"] / doc["attempts"] if doc["attempts"] else 0.0}
    for k, p in doc["pass_at_k"].items():
        if p.get("value") is not None:
            out[f"eval/pass@{k}"] = p["value"]
            out[f"eval/pass@{k}_ci_low"] = p["ci_low"]
            out[f"eval/pass@{k}_ci_high"] = p["ci_high"]
    if doc.get("reward_mean") is not None:
        out["eval/reward_mean"] = doc["reward_mean"]
    return out


def status_summary(doc: dict) -> dict[str, Any]:
    """The small form status.json carries (the full document is in <run>/evals/)."""
    p1 = doc["pass_at_k"].get("1") or {}
    return {
        "label": doc.get("label"),
        "step": doc.get("step"),
        "pass_at_1": p1.get("value"),
        "ci_low": p1.get("ci_low"),
        "ci_high": p1.get("ci_high"),
        "ci": p1.get("method"),
        "tasks": doc["tasks"],
        "scored_attempts": doc["scored_attempts"],
        "attempts": doc["attempts"],
        "unscorable": doc["unscorable"],
        "held_out": doc.get("held_out"),
        "wall_s": doc.get("wall_s"),
    }


class PeriodicEval(TrainerCallback):
    def __init__(self, runner: Any, rows: list[dict], settings: Any, status: Any, worker: Any = None):
        self.runner = runner
        self.worker = worker  # TRL's rollout worker: stopped before the last step's evaluation
        self.rows = rows
        self.s = settings
        self.status = status
        self.folder = Path(settings.run_dir) / "evals"
        # A report already in the run's folder is a step already evaluated. A finished run started again under its
        # RUN_NAME resumes at its last step and trains nothing, but the Trainer's closing log still reaches on_log
        # at that step: without this it evaluated the step again (48 rollouts in the CPU learn form) and overwrote
        # the report the run had been judged on, with another draw of the same weights.
        reported = (p.stem.removeprefix("step-") for p in self.folder.glob("step-*.json"))
        self.done_steps: set[int] = {int(n) for n in reported if n.isdigit()}

    def due(self, step: int, max_steps: int) -> bool:
        every = self.s.evaluation.steps
        if every <= 0 or step <= 0 or step in self.done_steps:
            return False
        return step % every == 0 or step == max_steps

    def on_log(self, args, state, control, logs=None, **kwargs):
        step = state.global_step
        if logs is None or not self.due(step, state.max_steps):
            return
        self.done_steps.add(step)
        if step >= state.max_steps and self.worker is not None:
            # TRL 1.16.0's `stop()` is idempotent (it returns when no child runs), so its own call when training
            # ends finds nothing left to stop.
            self.worker.stop()
            print(
                f"eval: step {step} is the last: the rollout worker stopped first (its groups would never train)",
                flush=True,
            )
        self.status.update(eval_state=f"evaluating step {step}")
        t0 = time.monotonic()
        try:
            doc = evaluate(self.runner, self.rows, self.s, label=f"step {step}")
        except EngineGone:
            raise  # the run stops with this step saved (trainer/watch/engine_gone.py), not this evaluation
        except Exception as exc:  # noqa: BLE001 - an evaluation never stops training
            self.status.update(eval_state=f"step {step} failed: {type(exc).__name__}: {exc}"[:500])
            print(f"eval: step {step} FAILED: {type(exc).__name__}: {exc}", flush=True)
            return
        doc["step"] = step
        write_report(doc, self.folder, stem=f"step-{step}")
        logs.update(eval_metrics(doc))
        self.status.update(eval=status_summary(doc), eval_state=None)
        print(
            f"eval: step {step} pass@1 {headline(doc)} on {doc['tasks']} task(s), {doc['unscorable']} unscorable, "
            f"{time.monotonic() - t0:.0f}s (trainer paused for it)",
            flush=True,
        )
