"""The first weight sync: timed and printed when it works, one line naming the transport when it fails.

The backend here is a stand-in for TRL's WeightTransferClient (its NCCL side needs two GPUs); it fails
the way TRL 1.16.0's client does: a RuntimeError whose cause is NCCL's own error."""

import pytest

from trainer.transfer.weights import SAFE_DEFAULT, FirstSync, FirstSyncFailed

SAFE = {"NCCL_P2P_DISABLE": "1", "NCCL_CUMEM_ENABLE": "0", "VLLM_HOST_IP": "127.0.0.1", "NCCL_SOCKET_IFNAME": "lo"}


class Backend:
    def __init__(self, fail_at: str = "", fail_times: int = 1):
        self.calls: list[str] = []
        self.fail_at = fail_at
        self.fail_times = fail_times

    def _call(self, name):
        self.calls.append(name)
        if name == self.fail_at and self.fail_times:
            self.fail_times -= 1
            try:
                raise RuntimeError("NCCL error: unhandled cuda error (run with NCCL_DEBUG=INFO for details)")
            except RuntimeError as nccl:
                raise RuntimeError(
                    "Failed to set up the NCCL weight-transfer group with the vLLM server at http://127.0.0.1:8001."
                ) from nccl

    def init_weight_transfer(self):
        self._call("init")

    def pause(self):
        self._call("pause")

    def send_weights(self, iterator):
        list(iterator)
        self._call("send")

    def resume(self):
        self._call("resume")

    def destroy(self):
        self._call("destroy")


def sync(wrapped):
    wrapped.pause()
    wrapped.send_weights(iter([("w", 1)]))
    wrapped.resume()


def test_a_working_first_sync_is_reported_once_with_the_transport():
    lines = []
    wrapped = FirstSync(Backend(), "nccl", SAFE, say=lines.append)
    wrapped.init_weight_transfer()
    sync(wrapped)
    sync(wrapped)
    assert wrapped.inner.calls == ["init", "pause", "send", "resume"] * 1 + ["pause", "send", "resume"]
    assert lines[0] == (
        "trainer: weight transfer nccl, transport NCCL_P2P_DISABLE=1 NCCL_CUMEM_ENABLE=0 VLLM_HOST_IP=127.0.0.1 "
        "NCCL_SOCKET_IFNAME=lo; NCCL's own init lines follow (NCCL_DEBUG)"
    )
    assert len(lines) == 2 and lines[1].startswith("trainer: first weight sync done: group set up in ")


@pytest.mark.parametrize("phase,where", [("init", "setting up the weight-transfer group"), ("send", "sending")])
def test_a_failed_first_sync_is_one_line_naming_the_transport(phase, where):
    wrapped = FirstSync(Backend(fail_at=phase), "nccl", SAFE, say=lambda _: None)
    with pytest.raises(FirstSyncFailed) as err:
        wrapped.init_weight_transfer()
        sync(wrapped)
    line = str(err.value)
    assert "\n" not in line
    assert line.startswith(f"trainer: the first weight sync to the engine failed while {where}")
    # The root cause (NCCL's words), not TRL's wrapper, and the transport in force.
    assert "RuntimeError: NCCL error: unhandled cuda error" in line
    assert "transport NCCL_P2P_DISABLE=1 NCCL_CUMEM_ENABLE=0 VLLM_HOST_IP=127.0.0.1 NCCL_SOCKET_IFNAME=lo" in line
    assert "ipc: host" in line


def test_p2p_on_is_told_to_go_back_to_the_safe_default():
    env = {**SAFE, "NCCL_P2P_DISABLE": "0", "NCCL_CUMEM_ENABLE": "1"}
    wrapped = FirstSync(Backend(fail_at="init"), "nccl", env, say=lambda _: None)
    with pytest.raises(FirstSyncFailed) as err:
        wrapped.init_weight_transfer()
    assert f"set {SAFE_DEFAULT} in .env" in str(err.value) and "NCCL issue #1647" in str(err.value)


def test_p2p_off_alone_is_named_as_the_measured_failure():
    env = {**SAFE, "NCCL_CUMEM_ENABLE": ""}
    wrapped = FirstSync(Backend(fail_at="init"), "nccl", env, say=lambda _: None)
    with pytest.raises(FirstSyncFailed) as err:
        wrapped.init_weight_transfer()
    assert "NCCL_CUMEM_ENABLE=(unset)" in str(err.value)
    assert "without NCCL_CUMEM_ENABLE=0 failed vLLM's group init" in str(err.value)


def test_a_later_sync_failure_is_not_dressed_up_as_a_transport_problem():
    backend = Backend()
    wrapped = FirstSync(backend, "nccl", SAFE, say=lambda _: None)
    wrapped.init_weight_transfer()
    sync(wrapped)
    backend.fail_at, backend.fail_times = "send", 1
    with pytest.raises(RuntimeError) as err:
        sync(wrapped)
    assert not isinstance(err.value, FirstSyncFailed)
