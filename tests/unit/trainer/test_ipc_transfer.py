"""WEIGHT_TRANSFER=ipc against a fake engine: an in-process HTTP server speaking vLLM's weight-transfer routes
(vllm/entrypoints/serve/dev/rlhf/api_router.py, 0.25.1 and 0.31.0) and recording every call in order.

A test double for two things only: the engine (no GPU and no vLLM on this host), and the CUDA handles, which need a
GPU (`reduce`/`uuid` passed to TorchSender; the tensors are stand-ins with the attributes the sender reads). The
engine double unpickles the handles exactly as vLLM's IPCWeightTransferUpdateInfo does and refuses, as vLLM does,
when VLLM_ALLOW_INSECURE_SERIALIZATION is off. The failure lines are FirstSync's and PushWatch's real ones.
"""

from __future__ import annotations

import base64
import json
import pickle
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from urllib.parse import parse_qs, urlparse

import pytest
from support import free_port

from trainer.transfer import weights
from trainer.transfer.ipc_transfer import IPCWeightTransfer, TorchSender, pick_sender, wire_update_info
from trainer.transfer.weights import FirstSyncFailed
from trainer.watch.engine_gone import EngineGone


class FakeTensor:
    def __init__(self, shape, dtype="torch.bfloat16"):
        self.shape, self.dtype = tuple(shape), dtype

    def detach(self):
        return self

    def contiguous(self):
        return self


class FakeVllm:
    """vLLM's dev routes: records (route, query, body); `fail` maps a route to an HTTP status; `hold` a route to
    seconds to wait before answering; `insecure` is VLLM_ALLOW_INSECURE_SERIALIZATION on the engine."""

    def __init__(self, insecure=True):
        self.calls: list[tuple[str, dict, object]] = []
        self.fail: dict[str, int] = {}
        self.hold: dict[str, float] = {}
        self.insecure = insecure
        self.received: list[dict] = []
        self.on_update = None
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                url = urlparse(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else None
                route = url.path.lstrip("/")
                fake.calls.append((route, parse_qs(url.query), body))
                time.sleep(fake.hold.get(route, 0))
                status, answer = 200, {"message": "ok"}
                if route in fake.fail:
                    status, answer = fake.fail[route], {"error": f"fake engine: {route} failed"}
                elif route == "update_weights":
                    info = body["update_info"]
                    if not fake.insecure:
                        status, answer = (
                            500,
                            {
                                "error": "Refusing to deserialize `ipc_handles_pickled` without "
                                "VLLM_ALLOW_INSECURE_SERIALIZATION=1"
                            },
                        )
                    else:
                        info = dict(info, ipc_handles=pickle.loads(base64.b64decode(info.pop("ipc_handles_pickled"))))
                        fake.received.append(info)
                        if fake.on_update:
                            fake.on_update()
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def routes(self):
        return [c[0] for c in self.calls]


@pytest.fixture
def engine():
    fake = FakeVllm()
    yield fake
    fake.server.shutdown()


def sender():
    # The handle stands in for reduce_tensor's rebuild args: picklable, naming what it was made from.
    return TorchSender(reduce=lambda t: ("handle", t.shape), uuid=lambda: "GPU-test-uuid")


PARAMS = [("model.embed_tokens.weight", FakeTensor((8, 4))), ("model.norm.weight", FakeTensor((4,), "torch.float32"))]


def push(client, params=PARAMS):
    client.pause()
    client.send_weights(iter(params))
    client.resume()


def test_the_protocol_in_vllms_order_with_the_handles_as_a_base64_pickle(engine):
    client = IPCWeightTransfer(engine.url, timeout_s=5, sender=sender())
    client.init_weight_transfer()
    push(client)
    push(client)
    once = ["pause", "start_weight_update", "update_weights", "finish_weight_update", "resume"]
    assert engine.routes() == ["init_weight_transfer_engine", *once, *once]
    assert engine.calls[0][2] == {"init_info": {}}
    assert engine.calls[1][1] == {"mode": ["keep"]}  # requests in flight frozen, not aborted
    assert engine.received[0] == {
        "names": ["model.embed_tokens.weight", "model.norm.weight"],
        "dtype_names": ["bfloat16", "float32"],
        "shapes": [[8, 4], [4]],
        "ipc_handles": [{"GPU-test-uuid": ("handle", (8, 4))}, {"GPU-test-uuid": ("handle", (4,))}],
    }


def test_every_sent_tensor_is_held_until_the_engine_has_read_it(engine):
    client = IPCWeightTransfer(engine.url, timeout_s=5, sender=sender())
    held_during_update = []
    engine.on_update = lambda: held_during_update.append(len(client.keep.held))
    client.init_weight_transfer()
    push(client)
    assert held_during_update == [2] and client.keep.held == []


def test_the_wire_body_leaves_unset_fields_out():
    out = wire_update_info({"names": ["a"], "ipc_handles": [{"u": (1,)}], "tensor_sizes": None, "packed": False})
    assert out == {
        "names": ["a"],
        "packed": False,
        "ipc_handles_pickled": base64.b64encode(pickle.dumps([{"u": (1,)}])).decode(),
    }


def test_without_vllm_the_handles_come_from_torch():
    # The host venv has no vllm: the last of the three senders (the GPU image picks vLLM's own).
    assert isinstance(pick_sender(), TorchSender)


# --- the failure lines, through the chain the trainer hands TRL -------------------------------------------------

ENV = {"CUDA_VISIBLE_DEVICES": "0", "PYTORCH_CUDA_ALLOC_CONF": ""}


def chained(url, timeout_s=300):
    s = SimpleNamespace(engine_url=url, weight_sync_timeout_s=timeout_s, weight_transfer="ipc")
    outer, _, watch = weights.chain(IPCWeightTransfer(url, timeout_s=timeout_s, sender=sender()), s, ENV)
    return outer, watch


def test_a_refused_init_is_one_line_naming_what_ipc_needs():
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    outer, _ = chained(url)
    with pytest.raises(FirstSyncFailed) as exc:
        outer.init_weight_transfer()
    line = str(exc.value)
    assert line.startswith(
        "trainer: the first weight sync to the engine failed while setting up the weight-transfer group "
        "(ConnectionRefusedError: [Errno 111] Connection refused); "
    )
    assert (
        "transport CUDA IPC on one GPU, CUDA_VISIBLE_DEVICES=0 NVIDIA_VISIBLE_DEVICES=(unset) "
        "PYTORCH_CUDA_ALLOC_CONF=(unset): engine and trainer must see the SAME physical GPU" in line
    )
    assert "`ipc: host` and one PID namespace" in line and "VLLM_ALLOW_INSECURE_SERIALIZATION=1" in line
    assert "\n" not in line


def test_an_engine_refusing_the_pickled_handles_is_one_line_with_its_own_words():
    fake = FakeVllm(insecure=False)
    try:
        outer, _ = chained(fake.url)
        outer.init_weight_transfer()
        outer.pause()
        with pytest.raises(FirstSyncFailed) as exc:
            outer.send_weights(iter(PARAMS))
        assert (
            "failed while sending the weights (EngineRefused: engine /update_weights answered HTTP 500: "
            '{"error": "Refusing to deserialize `ipc_handles_pickled` without VLLM_ALLOW_INSECURE_SERIALIZATION=1"})'
        ) in str(exc.value)
    finally:
        fake.server.shutdown()


def test_an_engine_that_500s_on_update_after_the_first_push_is_raised_as_it_is(engine):
    # Not a lost engine (it answered): PushWatch re-raises, and the traceback is the report (engine_gone.py).
    outer, _ = chained(engine.url)
    outer.init_weight_transfer()
    push(outer)
    engine.fail["update_weights"] = 500
    outer.pause()
    with pytest.raises(RuntimeError, match=r"engine /update_weights answered HTTP 500: .*update_weights failed"):
        outer.send_weights(iter(PARAMS))


def test_a_push_that_hangs_past_the_timeout_stops_the_run_as_an_engine_gone(engine):
    outer, watch = chained(engine.url, timeout_s=1)
    outer.init_weight_transfer()
    push(outer)
    engine.hold["pause"] = 3
    with pytest.raises(EngineGone) as exc:
        outer.pause()
    assert exc.value is watch.gone
    assert exc.value.reason().startswith(f"the engine at {engine.url} is gone: pausing it for a weight push failed")
    assert exc.value.detail.endswith("; no answer within WEIGHT_SYNC_TIMEOUT_S=1 s")
    assert exc.value.detail == "TimeoutError: timed out; no answer within WEIGHT_SYNC_TIMEOUT_S=1 s"


def test_expandable_segments_get_their_own_advice():
    advice = weights.transport_advice("ipc", {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
    assert "pidfd_getfd" in advice and "pytorch issue 165685" in advice
    assert "pidfd_getfd" not in weights.transport_advice("ipc", {})
