"""Engine-vs-trainer logprob mismatch on the tokens being trained, every logged step.

The engine samples each completion token and reports its logprob (the capture proxy's `per_token_logps`, TRL's
`old_log_probs`); the trainer recomputes the logprob of the same token in its loss. When both hold the same weights,
in agreeing precisions, at the same temperature, the two differ only by kernel noise. A wrong model or tokenizer, a
weight push that never landed, a dtype the engine does not share, raw instead of processed logprobs at a temperature
other than 1: each shows here first, long before the reward says anything. Two figures per logged step:

- `mismatch/kl_mean` is TRL 1.16.0's own `kl`, under a name that says what it is. AsyncGRPOTrainer.compute_loss
  (read at trl 1.16.0) takes `log_ratio = log_probs - old_log_probs` (trainer minus engine, per trained token) and
  logs the mean of the k3 estimator `(exp(log_ratio) - 1) - log_ratio` over the micro-batch's trained tokens, all
  ranks together; the logged step's value is the mean over its micro-batches (one per step at TOKEN_BUDGET with
  GRADIENT_ACCUMULATION_STEPS=1, the default, so then it is the token mean of the step). The tokens were sampled by
  the engine, so it estimates KL(engine || trainer) per token, in nats; 0 when the two agree.
- `mismatch/logprob_absdiff_max`: the largest |trainer logprob - engine logprob| over the step's trained tokens, all
  ranks and micro-batches (TRL reduces a `max` key by its maximum). It is what a mean hides: one token the engine
  scored at -0.1 and the trainer at -9 is a broken token, not noise. Read from the log-probs TRL's forward already
  computed (`install` hands TRL's compute_loss a model that keeps its output): no second forward pass.

When it is measured, and what else is in it. AsyncGRPO trains each sample once (no PPO epochs), in one optimizer
step, and compute_loss runs before that step's optimizer update, so the trainer's logprobs are those of the weights
after the run's previous step: the FIRST and only optimizer pass over the batch. The engine sampled with the weights
of the version the sample was stamped with, `sample/staleness_mean` steps older (TRL's staleness, logged in the same
step). At staleness 0 both figures are the engine-trainer mismatch alone; at staleness s they also carry the policy's
own drift over s optimizer updates, which grows with the learning rate. Read the two together: a large KL at
staleness near 0 is a defect; a KL that follows staleness is the async schedule (MAX_STALENESS bounds it).

The STOP_MISMATCH_KL rule (trainer/watch/stop_rules.py) reads `mismatch/kl_mean`; status.json, the console line and
scripts/status show both figures.
"""

from __future__ import annotations

import math
from collections.abc import MutableMapping

KL_KEY = "mismatch/kl_mean"
ABSDIFF_KEY = "mismatch/logprob_absdiff_max"
TRL_KL = "kl"  # AsyncGRPOTrainer's own key (trl 1.16.0)


def observe(logs: MutableMapping) -> None:
    """Name TRL's `kl` as the mismatch KL in the same logs dict (a step with no trained token logs none)."""
    value = logs.get(TRL_KL)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        logs[KL_KEY] = float(value)


def callback():
    """A transformers `TrainerCallback` that feeds `observe` from every `on_log`. Insert it FIRST
    (`callback_handler.callbacks.insert(0, ...)`): the Trainer lists its reporters (trackio, tensorboard) before the
    callbacks passed in, and they, status.json and the stop rules must all see the key in the same logs dict."""
    from transformers import TrainerCallback

    class _MismatchCallback(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs is not None:
                observe(logs)

    return _MismatchCallback()


class _KeepsOutput:
    """The model as TRL's compute_loss calls it, keeping the output of the call. TRL 1.16.0's compute_loss calls its
    `model` argument exactly once, for the forward with the fused log-prob head, and uses nothing else of it."""

    def __init__(self, model):
        self._model = model
        self.output = None

    def __call__(self, *args, **kwargs):
        self.output = self._model(*args, **kwargs)
        return self.output

    def __getattr__(self, name):
        return getattr(self._model, name)


def absdiff_max(log_probs, inputs) -> float:
    """This rank's max |trainer - engine| logprob over the micro-batch's trained tokens, NaN when it trains none.

    `log_probs` is the forward's per-position output (TRL's fused head, at the training temperature); the trained
    tokens are where the collator's `token_index` is set (>= 0), exactly the positions TRL's loss reads, with the
    engine's logprob for each in `old_log_probs` (trl 1.16.0, `DataCollatorForRollout` and `compute_loss`)."""
    import torch

    selected = inputs["token_index"] >= 0
    with torch.no_grad():
        trainer_lp = log_probs.detach().flatten()[inputs["token_index"][selected]].float()
        engine_lp = inputs["old_log_probs"][selected].to(trainer_lp.device, torch.float32)
        if trainer_lp.numel() == 0:
            return math.nan
        return (trainer_lp - engine_lp).abs().max().item()


def _across_ranks(value: float, accelerator) -> float:
    """The max over ranks, NaN ranks ignored. A collective: every rank calls it, as every rank runs compute_loss."""
    import torch

    gathered = accelerator.gather(torch.tensor([value], dtype=torch.float32, device=accelerator.device))
    finite = gathered[~torch.isnan(gathered)]
    return finite.max().item() if finite.numel() else math.nan


def install(trainer) -> None:
    """Measure `mismatch/logprob_absdiff_max` inside TRL's own loss step and name its `kl` as `mismatch/kl_mean`.

    Wraps the instance's compute_loss (TRL's, unchanged) rather than subclassing AsyncGRPOTrainer: train.py builds
    TRL's class as is, and a TRAIN_SCRIPT override can call `install` on its own trainer. The figure goes into TRL's
    metric sink (`_metrics["train"]`, trl 1.16.0), which `log()` reduces per logged step (a `max` word: the max)."""
    original = trainer.compute_loss

    def compute_loss(model, inputs, return_outputs=False, num_items_in_batch=None):
        keeps = _KeepsOutput(model)
        result = original(keeps, inputs, return_outputs=return_outputs, num_items_in_batch=num_items_in_batch)
        local = absdiff_max(keeps.output.log_probs, inputs)
        trainer._metrics["train"][ABSDIFF_KEY].append(_across_ranks(local, trainer.accelerator))
        return result

    trainer.compute_loss = compute_loss
    trainer.callback_handler.callbacks.insert(0, callback())
