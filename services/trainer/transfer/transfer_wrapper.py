"""A weight-transfer backend wrapped to watch what it does: the five calls TRL 1.16.0's AsyncGRPO makes
(`init_weight_transfer/pause/send_weights/resume/destroy`) go through to `inner` unchanged, so a watcher
(weights.ServedVersion, served_check.ServedWeights) overrides only the call it watches."""

from __future__ import annotations


class TransferWrapper:
    def __init__(self, inner):
        self.inner = inner

    def init_weight_transfer(self) -> None:
        self.inner.init_weight_transfer()

    def pause(self) -> None:
        self.inner.pause()

    def send_weights(self, iterator) -> None:
        self.inner.send_weights(iterator)

    def resume(self) -> None:
        self.inner.resume()

    def destroy(self) -> None:
        self.inner.destroy()
