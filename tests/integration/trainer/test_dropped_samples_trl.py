"""TRL 1.16.0's own token-budget drop, counted end to end: a tiny Qwen3 on CPU trained by AsyncGRPOTrainer.

Needs torch + trl, so it runs in the trainer image (`tests/run-in-image trainer tests/integration/trainer`). Only the rollout worker (a feed of prepared samples) and the vLLM weight transfer (a no-op) are
stand-ins, since neither a rollout stack nor vLLM runs here; the planner that drops, the loss and the optimizer
are TRL's.
"""

import logging

import numpy as np
from transformers import TrainerCallback  # noqa: E402

from benchmarks.trainer_gpu import attention, harness  # noqa: E402
from benchmarks.trainer_gpu.trajectories import rollout_sample  # noqa: E402
from trainer.watch.dropped_samples import DroppedSampleCounter  # noqa: E402

BUDGET = 256
OVERSIZE = 400


def _rollouts(vocab):
    def make(i):
        n = OVERSIZE if i == 1 else 120
        ids = np.random.default_rng(i).integers(10, vocab, size=n)
        mask = np.zeros(n, np.int64)
        mask[n // 2 :] = 1
        return [rollout_sample(ids, mask, group_id=i, seed=i, vocab=vocab)]

    return make


class _Recorder(TrainerCallback):
    def __init__(self):
        self.logs = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.logs.append(dict(logs or {}))


def test_oversize_sample_is_dropped_by_trl_and_counted(tmp_path, caplog):
    attention.install()
    recorder = _Recorder()
    bench = harness.build("tiny", "float32", workdir=str(tmp_path), extra_callbacks=(recorder,))
    counter = DroppedSampleCounter()
    bench.trainer.callback_handler.callbacks.insert(0, counter.callback())

    with caplog.at_level(logging.WARNING):
        records = harness.run(bench, _rollouts(bench.shape["vocab_size"]), token_budget=BUDGET, steps=2)

    assert records != "OOM" and len(records) == 2
    # Every row stayed within the budget: the 400-token sample went nowhere.
    assert all(r.forwarded_tokens <= BUDGET for r in records)
    assert sum(r.samples for r in records) == 4
    assert f"Dropping a rollout sample of {OVERSIZE} tokens that exceeds token_budget={BUDGET}" in caplog.text
    assert counter.oversize == 1
    # Reporters listed after the counter see the run total in the same logs dict, zero windows included.
    step_logs = [logs for logs in recorder.logs if "loss" in logs]
    assert [logs["batch/dropped_oversize_cumulative"] for logs in step_logs] == [1, 1]
