"""The mismatch figures measured inside TRL 1.16.0's own loss step: a tiny Qwen3 on CPU trained by AsyncGRPOTrainer
on samples whose engine logprobs are the model's own, shifted by known amounts.

Needs torch + trl, so it runs in the trainer image (`tests/run-in-image trainer tests/integration/trainer`). As in
test_dropped_samples_trl.py, only the rollout worker (a feed of prepared samples) and the weight transfer (a no-op) are
stand-ins; the planner, the tree packer, the fused log-prob head and compute_loss are TRL's. The "engine" logprobs are
a plain transformers forward of the same saved weights (eager attention, full logits), so they are what a matching
engine would report, and each trained token's engine logprob is then moved by a chosen amount:

- every trained token 0.1 nat lower at the engine but one, which is 0.75 nat HIGHER (the one a mean hides): the step's
  max |trainer - engine| must be 0.75 (the largest signed difference is +0.1: the figure must be absolute) and its KL
  the k3 mean over those shifts, computed here in float64;
- the prompt and tool-output positions (completion_mask 0) carry logprob 0.0 as OpenEnv zero-fills them, about 7.6
  nats from the model's own (-ln 2048): any of them in the figure would read ~7.6, not 0.75;
- no shift: both figures near 0 (the same tokens, scored the same way by both sides).

The learning rate is 0 so the weights the step scores with stay the saved ones on every step.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, TrainerCallback

from benchmarks.trainer_gpu import attention, harness
from trainer.watch import mismatch

LENGTH, PROMPT = 120, 60  # tokens per sample; the first PROMPT are context (mask 0), the rest trained
BUDGET = 256  # two samples per step (TRL's planner closes a row when the next sample does not fit)
BASE_SHIFT, ODD_SHIFT, ODD_AT = -0.1, 0.75, 7  # engine logprob = trainer's + shift; ODD_AT-th trained token is odd


def k3(log_ratio: float) -> float:
    return math.expm1(log_ratio) - log_ratio


class _Recorder(TrainerCallback):
    def __init__(self):
        self.logs = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.logs.append(dict(logs or {}))


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    attention.install()
    recorder = _Recorder()
    workdir = tmp_path_factory.mktemp("mismatch")
    bench = harness.build("tiny", "float32", workdir=str(workdir), extra_callbacks=(recorder,))
    bench.trainer.args.learning_rate = 0.0
    mismatch.install(bench.trainer)
    reference = AutoModelForCausalLM.from_pretrained(f"{workdir}/model", attn_implementation="eager").eval()
    return bench, recorder, reference


def _rollouts(bench, reference, shifted: bool):
    from trl.experimental.async_grpo.async_rollout_worker import RolloutSample

    vocab, temperature = bench.shape["vocab_size"], bench.trainer.args.temperature

    def make(i):
        ids = np.random.default_rng(1000 + i).integers(10, vocab, size=LENGTH)
        mask = np.zeros(LENGTH, np.int64)
        mask[PROMPT:] = 1
        with torch.no_grad():
            logits = reference(input_ids=torch.tensor(ids)[None]).logits[0].double() / temperature
        own = torch.log_softmax(logits[:-1], dim=-1).gather(1, torch.tensor(ids[1:])[:, None])[:, 0].numpy()
        engine = np.zeros(LENGTH)  # masked positions: OpenEnv's zero fill
        engine[1:] = own
        if shifted:
            shift = np.full(LENGTH, BASE_SHIFT)
            shift[PROMPT + ODD_AT] = ODD_SHIFT
            engine = engine + shift
        engine = np.where(mask > 0, engine, 0.0).astype(np.float32)
        return [
            RolloutSample(
                prompt=[],
                completion=[],
                input_ids=ids,
                completion_mask=mask,
                old_log_probs=engine,
                advantage=1.0 if i % 2 == 0 else -1.0,
                model_version=0,
                group_id=i,
                metrics={},
            )
        ]

    return make


def _steps(bench, recorder, rollouts, steps):
    recorder.logs.clear()
    records = harness.run(bench, rollouts, token_budget=BUDGET, steps=steps)
    assert records != "OOM" and len(records) == steps
    logged = [logs for logs in recorder.logs if "loss" in logs]
    assert len(logged) == steps and all(r.trained_tokens == 2 * (LENGTH - PROMPT) for r in records)
    return logged


def test_known_shifts_give_the_exact_max_gap_and_the_k3_mean(bench):
    bench, recorder, reference = bench
    logged = _steps(bench, recorder, _rollouts(bench, reference, shifted=True), steps=2)
    trained = LENGTH - PROMPT
    # log_ratio = trainer - engine = -shift, identical in every sample, so every step's token mean is this one.
    expected_kl = ((trained - 1) * k3(-BASE_SHIFT) + k3(-ODD_SHIFT)) / trained
    assert expected_kl == pytest.approx(0.0087908, abs=1e-7)
    for logs in logged:
        assert logs["mismatch/logprob_absdiff_max"] == pytest.approx(abs(ODD_SHIFT), abs=1e-5)
        assert logs["mismatch/kl_mean"] == logs["kl"]  # TRL's own figure, named
        assert logs["mismatch/kl_mean"] == pytest.approx(expected_kl, rel=1e-4)


def test_an_engine_that_agrees_reads_zero(bench):
    bench, recorder, reference = bench
    (logs,) = _steps(bench, recorder, _rollouts(bench, reference, shifted=False), steps=1)
    assert 0.0 <= logs["mismatch/logprob_absdiff_max"] < 1e-4
    assert abs(logs["mismatch/kl_mean"]) < 1e-8
