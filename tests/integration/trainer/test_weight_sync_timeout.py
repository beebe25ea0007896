"""WEIGHT_SYNC_TIMEOUT_S reaches TRL where TRL reads it, and the internals trainer/watch/engine_gone.py's bounds rely on are there.

TRL 1.16.0 (read at that tag): `AsyncGRPOConfig.weight_sync_timeout` (default 1800) is handed by
`AsyncGRPOTrainer.__init__` to its own `WeightTransferClient`, which bounds the group set-up, the transfer and its
finalisation with it. The mock's backend (the CPU form's) takes the same figure as its per-request timeout. A lost
engine is noticed in the push TRL runs from `on_step_end`, or in the `check_health` its rollout queue calls every
5 s of waiting; the rollout worker's child is stopped within 15 + 5 s.

Runs in the trainer image: tests/run-in-image trainer -q tests/integration/trainer/test_weight_sync_timeout.py
"""

import inspect

from trl.experimental.async_grpo import AsyncGRPOTrainer
from trl.experimental.async_grpo.async_grpo_trainer import RolloutQueueDataset
from trl.experimental.async_grpo.async_rollout_worker import AsyncRolloutWorker
from trl.experimental.async_grpo.weight_transfer import WeightTransferClient

from stack.readers import trainer as config
from trainer import train
from trainer.transfer import weights


def test_the_setting_is_trls_weight_sync_timeout(tmp_path):
    def timeout(**env):
        s = config.from_env({"WEIGHT_TRANSFER": "mock", "BUCKET_DIR": str(tmp_path), **env})
        return train.trl_config(s, "none", {}, cpu=True).weight_sync_timeout

    assert timeout(WEIGHT_SYNC_TIMEOUT_S="42") == 42
    assert timeout() == 300  # the field's default, not TRL's 1800


def test_trl_reads_it_where_this_stack_relies_on_it():
    assert "weight_sync_timeout=self.args.weight_sync_timeout" in inspect.getsource(AsyncGRPOTrainer.__init__)
    send = inspect.getsource(WeightTransferClient.send_weights)
    assert "update_weights(self._weight_update_info, timeout=self.weight_sync_timeout)" in send
    assert "init_weight_transfer_engine(init_info, timeout=self.weight_sync_timeout)" in inspect.getsource(
        WeightTransferClient.init_weight_transfer
    )
    # The push runs at every step's end, so a lost engine leaves train() right after an optimizer step.
    assert "StepIntervalCallback(self._sync_weight, self.args.weight_sync_steps)" in inspect.getsource(
        AsyncGRPOTrainer.__init__
    )
    push = inspect.getsource(AsyncGRPOTrainer._sync_weight_merged)
    assert push.index("self.weight_transfer.pause()") < push.index("self.weight_transfer.send_weights(")
    assert push.index("self.weight_transfer.send_weights(") < push.index("self.weight_transfer.resume()")
    # While rollouts are awaited: check_health every poll_interval_s (5 s) of an empty queue.
    wait = inspect.getsource(RolloutQueueDataset.__iter__)
    assert "self.queue.get(timeout=self.poll_interval_s)" in wait and "self.check_health_fn(self.stale_after_s)" in wait
    assert inspect.signature(RolloutQueueDataset).parameters["poll_interval_s"].default == 5.0
    # The worker's child: 15 s to leave, then terminate (engine_gone.py's bound counts these 20 s).
    assert "self._process.join(timeout=15)" in inspect.getsource(AsyncRolloutWorker.stop)


def test_the_mock_backend_takes_it_per_request():
    client = weights.build("mock", "http://127.0.0.1:9", 42)
    assert client.timeout_s == 42
