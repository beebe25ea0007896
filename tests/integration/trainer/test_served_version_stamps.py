"""Rollouts started while the engine still serves older weights are stamped with that older version.

TRL 1.16.0's own `_sync_weight_merged` runs the push here (pause, send_weights, resume, then its version bump and
`rollout_worker.update_model_version`), on a stand-in trainer that carries only the attributes that method reads.
The weight transfer is trainer.transfer.weights.ServedVersion over a backend that records calls, probing a stand-in engine
whose update counter we script; the rollout worker is ours (trainer.rollouts.worker.HarborRolloutWorker), built without its
constructor (which wants a dataset and an engine) and holding the real `mp.Value` TRL's rollout child reads when it
stamps a new group (`RolloutGroup.model_version = self.model_version`).

Runs in the trainer image: tests/run-in-image trainer -q tests/integration/trainer/test_served_version_stamps.py
"""

import multiprocessing as mp
import time
from types import SimpleNamespace

import torch
from accelerate import Accelerator
from trl.experimental.async_grpo import AsyncGRPOTrainer

from trainer.rollouts.worker import HarborRolloutWorker
from trainer.transfer.weights import ServedVersion


class Backend:
    def __getattr__(self, name):
        return lambda *a: None


def stand_in(engine_versions):
    versions = iter(engine_versions)
    served = ServedVersion(Backend(), "http://engine", probe=lambda url: (next(versions), False))
    worker = object.__new__(HarborRolloutWorker)
    worker._model_version_value = mp.get_context("spawn").Value("i", 0)
    worker.served = served
    trainer = SimpleNamespace(
        accelerator=Accelerator(cpu=True),
        model=torch.nn.Linear(2, 2),
        weight_transfer=served,
        rollout_worker=worker,
        model_version=0,
        _streaming_iter=lambda: iter(()),
    )
    return trainer, worker


def stamps(engine_versions):
    """(TRL's version, the version a group started now is stamped with) after each push."""
    trainer, worker = stand_in(engine_versions)
    out = []
    for _ in engine_versions:
        AsyncGRPOTrainer._sync_weight_merged(trainer, time.time())
        out.append((trainer.model_version, worker.model_version))
    return out


def test_an_engine_that_takes_every_push_serves_trls_version():
    assert stamps([11, 12, 13]) == [(1, 1), (2, 2), (3, 3)]


def test_groups_started_after_a_push_that_did_not_land_count_as_the_old_version():
    # Pushes 3 and 4 did not land (the engine's counter stayed at 11); push 5 did, with every weight.
    assert stamps([10, 11, 11, 11, 12]) == [(1, 1), (2, 2), (3, 2), (4, 2), (5, 5)]
