"""WEIGHT_SYNC_TIMEOUT_S reaches TRL where TRL reads it, and the internals the lost-engine wait relies on are there.

TRL 1.16.0 (read at that tag): `AsyncGRPOConfig.weight_sync_timeout` (default 1800) is handed by
`AsyncGRPOTrainer.__init__` to its own `WeightTransferClient`, which bounds the group set-up, the transfer and its
finalisation with it; trainer/rejoin.py re-sends `AsyncGRPOTrainer._streaming_iter()` to a re-joined engine. The mock's
backend (the CPU form's) takes the same figure as its per-request timeout.

Runs in the trainer image: tests/run-in-image trainer -q tests/integration/trainer/test_weight_sync_timeout.py
"""

import inspect

from trl.experimental.async_grpo import AsyncGRPOTrainer
from trl.experimental.async_grpo.weight_transfer import WeightTransferClient

from trainer import config, train, weights


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
    # What a re-joined engine is sent: the generator TRL's own push sends.
    assert "self.weight_transfer.send_weights(self._streaming_iter())" in inspect.getsource(
        AsyncGRPOTrainer._sync_weight_merged
    )


def test_the_mock_backend_takes_it_per_request():
    client = weights.build("mock", "http://127.0.0.1:9", 42)
    assert client.timeout_s == 42
