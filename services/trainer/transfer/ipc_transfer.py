"""WEIGHT_TRANSFER=ipc: AsyncGRPO's weight transfer into a vLLM on the SAME GPU, through vLLM's CUDA-IPC engine.

The one-GPU form (compose.one-gpu.yaml). NCCL refuses two ranks on one device, so the weights do not travel at
all: the trainer shares CUDA IPC handles of its tensors, and the engine's `IPCWeightTransferEngine` rebuilds them
and copies them into its model (vllm/distributed/weight_transfer/ipc_engine.py, read at v0.25.1, the GPU machine's,
and v0.31.0, the pin). Measured on one H200 with 0.25.1: 2.82 GB in 0.20-0.27 s a push, no extra memory unpacked.

The HTTP sequence is vLLM's (vllm/entrypoints/serve/dev/rlhf/api_router.py, the same routes in both versions;
VLLM_SERVER_DEV_MODE=1): `POST /init_weight_transfer_engine` once, then per push `/pause?mode=keep` (as TRL's own
client and the mock's do: requests in flight are frozen, not aborted), `/start_weight_update`, `/update_weights`
with the handles as a base64 pickle (`ipc_handles_pickled`, which the engine unpickles only with
VLLM_ALLOW_INSECURE_SERIALIZATION=1), `/finish_weight_update`, `/resume`. Every call has the push timeout
(WEIGHT_SYNC_TIMEOUT_S); vLLM's own HTTP sender hard-codes 300 s, which is why the control plane here is ours.

Who makes the handles, in order of preference (`pick_sender`):
- vLLM >= 0.28: `WeightTransferTrainerFactory.trainer_init(IPCTrainerInitInfo(rank=0))` with `Control` as its
  client (the `VLLMWeightSyncClient` protocol: four methods, structural) and the push's iterator as its source.
- vLLM 0.25-0.27: `IPCWeightTransferEngine.trainer_send_weights` with a callable `send_mode` posting through
  `Control`. That module imports `ray` at its top (for its ray send mode only; 0.31's does not).
- Neither importable (vLLM 0.25-0.27 in an image without ray): `TorchSender`, the same unpacked wire format made
  with torch's `reduce_tensor`, as vLLM 0.25.1's `_send_unpacked` makes it: one `{gpu_uuid: rebuild args}` per
  tensor. Installing ray (hundreds of MB) for an import the HTTP path never uses would be the alternative.

Every path keeps a reference to each sent tensor until `/finish_weight_update` has answered: `reduce_tensor`'s
handle does not keep the storage alive, and TRL's iterator yields fresh bfloat16 casts of the float32 master weights
that would otherwise be freed (and reused) before the engine finished reading them (vLLM 0.31 keeps them across
finish for the same reason; 0.25.1 dropped them before it).
"""

from __future__ import annotations

import base64
import logging
import pickle
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import httpx

log = logging.getLogger(__name__)


class EngineRefused(RuntimeError):
    """The engine answered a weight-transfer route with an error status (its own words kept)."""


class Control:
    """vLLM's weight-sync control plane over HTTP, with one timeout for every call.

    Also vLLM 0.31's `VLLMWeightSyncClient` (init_weight_transfer_engine, start_weight_update, update_weights,
    finish_weight_update), so its trainer engine can drive a push through it."""

    def __init__(self, base_url: str, timeout_s: float, client: httpx.Client | None = None):
        self.base = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.http = client or httpx.Client(timeout=timeout_s)

    def post(self, route: str, json: Any = None, params: dict | None = None) -> None:
        resp = self.http.post(f"{self.base}/{route}", json=json, params=params, timeout=self.timeout_s)
        if resp.status_code != 200:
            detail = " ".join(resp.text.split())[:300]
            raise EngineRefused(f"engine /{route} answered HTTP {resp.status_code}: {detail}")

    def init_weight_transfer_engine(self, init_info: dict) -> None:
        self.post("init_weight_transfer_engine", {"init_info": init_info})

    def start_weight_update(self) -> None:
        self.post("start_weight_update")

    def update_weights(self, update_info: dict) -> None:
        self.post("update_weights", {"update_info": wire_update_info(update_info)})

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        self.post("finish_weight_update", None if weight_version is None else {"weight_version": weight_version})


def wire_update_info(update_info: dict) -> dict:
    """An update dict as JSON: raw `ipc_handles` become `ipc_handles_pickled` (base64 of a pickle, what the engine's
    `IPCWeightTransferUpdateInfo` unpickles); unset fields are left out, so the same body suits vLLM 0.25's dataclass
    (which has `packed`) and 0.31's (which moved `packed` to the init info)."""
    out = {k: v for k, v in update_info.items() if v is not None and k != "ipc_handles"}
    if update_info.get("ipc_handles") is not None:
        out["ipc_handles_pickled"] = base64.b64encode(pickle.dumps(update_info["ipc_handles"])).decode("ascii")
    return out


class Keep:
    """Holds every tensor an iterator yields, so its storage outlives the push (the module docstring says why)."""

    def __init__(self):
        self.held: list = []

    def wrap(self, iterator: Iterable) -> Iterator:
        for name, tensor in iterator:
            self.held.append(tensor)
            yield name, tensor

    def release(self) -> None:
        self.held.clear()


# --- who makes the handles ------------------------------------------------------------------------------------


class TorchSender:
    """The unpacked IPC wire format from torch alone (vLLM 0.25.1's `_send_unpacked`, one trainer rank).

    `reduce` and `uuid` are torch's (`reduce_tensor`, the device's UUID) unless given: a CPU test passes its own."""

    name = "torch reduce_tensor (vLLM's unpacked wire format)"

    def __init__(self, reduce: Callable | None = None, uuid: Callable[[], str] | None = None):
        self.reduce = reduce
        self.uuid = uuid

    def init(self, control: Control) -> None:
        # vLLM's IPC engine needs no rendezvous; an empty init_info suits 0.25's and 0.31's (packed defaults off).
        control.init_weight_transfer_engine({})

    def send(self, iterator: Iterable, control: Control) -> None:
        reduce, uuid = self.reduce, self.uuid
        if reduce is None or uuid is None:
            import torch
            from torch.multiprocessing.reductions import reduce_tensor

            def reduce(t):
                return reduce_tensor(t)[1]

            device = torch.cuda.current_device()

            def uuid():
                return str(torch.cuda.get_device_properties(device).uuid)

        gpu = uuid()
        names, dtypes, shapes, handles = [], [], [], []
        refs = []  # a non-contiguous tensor's contiguous copy is new storage: held to the end of the push
        for name, tensor in iterator:
            weight = tensor.detach().contiguous()
            refs.append(weight)
            names.append(name)
            dtypes.append(str(weight.dtype).split(".")[-1])
            shapes.append(list(weight.shape))
            handles.append({gpu: reduce(weight)})
        control.start_weight_update()
        control.update_weights({"names": names, "dtype_names": dtypes, "shapes": shapes, "ipc_handles": handles})
        control.finish_weight_update()


class Vllm025Sender:
    """vLLM 0.25-0.27: `IPCWeightTransferEngine.trainer_send_weights` makes the handles, `Control` posts them."""

    name = "vLLM IPCWeightTransferEngine.trainer_send_weights"

    def __init__(self, engine_cls):
        self.engine_cls = engine_cls

    def init(self, control: Control) -> None:
        control.init_weight_transfer_engine({})

    def send(self, iterator: Iterable, control: Control) -> None:
        from dataclasses import asdict

        control.start_weight_update()
        self.engine_cls.trainer_send_weights(iterator, {"send_mode": lambda info: control.update_weights(asdict(info))})
        control.finish_weight_update()


class Vllm031Sender:
    """vLLM >= 0.28: its trainer-side engine (`WeightTransferTrainerFactory`) drives start/update/finish itself."""

    name = "vLLM WeightTransferTrainerFactory (ipc)"

    def __init__(self, factory, init_info_cls, source_cls):
        self.factory, self.init_info_cls = factory, init_info_cls

        class PushSource(source_cls):
            """The push in progress: TRL hands a one-pass iterator per push; vLLM's IPC engine only iterates."""

            current: Iterable = ()

            def metadata(self):
                raise NotImplementedError("the IPC engine iterates its source and never asks for metadata")

            def __iter__(self):
                return iter(self.current)

        self.source = PushSource()
        self.engine = None

    def init(self, control: Control) -> None:
        # trainer_init posts /init_weight_transfer_engine with {"packed": false} (the sender is rank 0).
        self.engine = self.factory.trainer_init(
            self.init_info_cls(rank=0, packed=False), client=control, source=self.source
        )

    def send(self, iterator: Iterable, control: Control) -> None:
        self.source.current = iterator
        try:
            self.engine.send_weights()
        finally:
            self.source.current = ()


def pick_sender():
    """The newest of vLLM's trainer sides that imports here, else torch's (the module docstring says why)."""
    try:
        from vllm.distributed.weight_transfer import WeightSource, WeightTransferTrainerFactory
        from vllm.distributed.weight_transfer.ipc_engine import IPCTrainerInitInfo

        return Vllm031Sender(WeightTransferTrainerFactory, IPCTrainerInitInfo, WeightSource)
    except ImportError:
        pass
    try:
        from vllm.distributed.weight_transfer.ipc_engine import IPCWeightTransferEngine

        if hasattr(IPCWeightTransferEngine, "trainer_send_weights"):
            return Vllm025Sender(IPCWeightTransferEngine)
    except ImportError as exc:
        log.info("vLLM's IPC trainer side does not import here (%s): handles made with torch's reduce_tensor", exc)
    return TorchSender()


class IPCWeightTransfer:
    """The five methods TRL 1.16.0's AsyncGRPOTrainer calls (`init_weight_transfer`, `pause`, `send_weights`,
    `resume`, `destroy`; async_grpo_trainer.py's WeightTransferProtocol), over vLLM's IPC engine."""

    def __init__(self, engine_url: str, timeout_s: float = 300.0, sender=None, client: httpx.Client | None = None):
        self.control = Control(engine_url, timeout_s, client)
        self.sender = sender
        self.keep = Keep()

    def init_weight_transfer(self) -> None:
        if self.sender is None:
            self.sender = pick_sender()
        log.info("ipc weight transfer: handles by %s", self.sender.name)
        self.sender.init(self.control)

    def pause(self) -> None:
        self.control.post("pause", params={"mode": "keep"})

    def send_weights(self, iterator) -> None:
        try:
            self.sender.send(self.keep.wrap(iterator), self.control)
        finally:
            self.keep.release()

    def resume(self) -> None:
        self.control.post("resume")

    def destroy(self) -> None:
        self.control.http.close()
