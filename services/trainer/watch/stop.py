"""SIGTERM (`docker compose stop`, a preemption notice) ends the run with a checkpoint and 0 steps lost.

Without a handler `docker compose stop` loses up to SAVE_STEPS-1 steps (24 by default, measured) and
status.json keeps saying "training".

Where the safe point is, in TRL 1.16.0's AsyncGRPO (read at that version): training is transformers
5.17's `Trainer._inner_training_loop`. Each optimizer step first pulls its micro-batches from TRL's
`RolloutQueueDataset`, which blocks on the rollout queue, calling the rollout worker's
`check_health(stale_after_s)` every 5 s while it waits; then forward/backward, optimizer step,
`on_step_end` (weight sync), and the save when `control.should_save`.

- Signal while a step computes: `on_step_end` sets `should_save` and `should_training_stop`; the
  Trainer saves checkpoint-N for the step just finished and leaves its loop.
- Signal while waiting for rollouts (on GPU this wait can last as long as a rollout, minutes, far past
  any grace period): the model holds exactly step N's weights (nothing was applied since), so the
  worker's `check_health` raises `StopRequested` within 5 s, TRL's own `finally` stops the rollout
  worker, and `save_now` writes checkpoint-N through the Trainer's `_save_checkpoint` (TRL's override
  adds the rollout position), unless the step-end save already wrote it.
- Signal before training starts (warm-up rollout, model load): nothing to save; the handler raises
  `StopRequested` at once, and the run is "stopped", not "failed".
"""

from __future__ import annotations

import signal

from transformers import TrainerCallback

_requested: list[str] = []  # the signal's name once one arrived (module state: signal handlers are global)
_training = False


class StopRequested(Exception):
    """A stop signal arrived; raised at a point where leaving the training loop loses nothing."""


def requested() -> str | None:
    return _requested[0] if _requested else None


def _on_signal(signum, _frame) -> None:
    name = signal.Signals(signum).name
    first = not _requested
    if first:
        _requested.append(name)
    if not _training:
        raise StopRequested(f"{name} before training started")
    if first:
        print(f"trainer: {name}: saving a checkpoint at the next safe point, then stopping", flush=True)


def install() -> None:
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _on_signal)


def raise_if_requested() -> None:
    """Called while waiting for rollouts (the worker's health check): the safe point to leave at."""
    if _requested:
        raise StopRequested(f"{_requested[0]} while waiting for rollouts")


class StopCallback(TrainerCallback):
    def on_train_begin(self, args, state, control, **kwargs):
        global _training
        _training = True

    def on_step_end(self, args, state, control, **kwargs):
        if _requested:
            control.should_save = True
            control.should_training_stop = True

    def on_train_end(self, args, state, control, **kwargs):
        global _training
        _training = False


def save_now(trainer) -> str:
    """Write checkpoint-<global_step> unless it exists; returns its folder name."""
    import os

    step = trainer.state.global_step
    name = f"checkpoint-{step}"
    path = os.path.join(trainer.args.output_dir, name)
    if step > 0 and not os.path.isfile(os.path.join(path, "trainer_state.json")):
        trainer._save_checkpoint(trainer.model, trial=None)
    return name
