"""The control's weight transfer: every push acknowledged, none applied (stdlib only: unit-tested on the CPU host).

The learning run's claim is that held-out pass@1 rose BECAUSE the engine served the trained weights. The control
runs the same thing with this wrapper around the real client (vLLM's IPC one on the GPU, the mock's on the CPU):
`init_weight_transfer`, `pause`, `resume` and `destroy` go to the engine as in the learning run (the engine pauses
and resumes, TRL times its syncs, the run's status counts them), but `send_weights` drains TRL's iterator and
sends nothing, so the engine keeps serving the base weights. The CPU gate's control does the same on the mock
engine (its `weights_not_served` fault); vLLM has no such fault, so the trainer's side skips the send instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable


class SkippedPushes:
    """A weight-transfer client whose `send_weights` does nothing but count; every other call is the inner one's."""

    def __init__(self, inner):
        self.inner = inner
        self.skipped = 0
        self.tensors_drained = 0

    def init_weight_transfer(self) -> None:
        self.inner.init_weight_transfer()

    def pause(self) -> None:
        self.inner.pause()

    def send_weights(self, iterator: Iterable) -> None:
        # Drained, not left unread: TRL's iterator gathers each parameter as it is read (a generator over the
        # model's state), so reading it costs what a real push costs on the trainer's side.
        for _ in iterator:
            self.tensors_drained += 1
        self.skipped += 1

    def resume(self) -> None:
        self.inner.resume()

    def destroy(self) -> None:
        self.inner.destroy()


def wrap_build(build: Callable) -> Callable:
    """`trainer.transfer.weights.build` with its client wrapped in SkippedPushes (None stays None: TRL's own client, which
    this control cannot wrap, so it refuses that case in one line)."""

    def built(mode: str, engine_url: str, timeout_s: float | None = None):
        client = build(mode, engine_url, timeout_s)
        if client is None:
            raise SystemExit(
                f"learn: the control cannot skip the pushes of WEIGHT_TRANSFER={mode} (TRL builds that client "
                "itself): run the control with WEIGHT_TRANSFER=ipc on the GPU or mock on the CPU"
            )
        return SkippedPushes(client)

    return built
