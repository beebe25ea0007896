"""How new weights reach the engine after each optimizer step (WEIGHT_TRANSFER), and what the operator
sees of the first sync.

- `nccl` (GPU): TRL's own `WeightTransferClient`, built by the trainer against ENGINE_URL (vLLM's NCCL
  weight-transfer engine; the engine runs with VLLM_SERVER_DEV_MODE=1). The transport between the two
  containers is compose.yaml's `x-nccl-env` (shared memory by default: P2P across containers that each
  see one GPU can fail at the first sync).
- `ipc` (one GPU): engine and trainer on the same device, vLLM's CUDA-IPC weight transfer
  (trainer/transfer/ipc_transfer.py; compose.one-gpu.yaml).
- `mock` (CPU form): the mock engine's backend, `mock_engine.weight_client`, which exposes the same five
  methods AsyncGRPO calls (`init_weight_transfer/pause/send_weights/resume/destroy`). Same trainer code
  otherwise.

After every push `ServedWeights` (trainer/transfer/served_check.py) scores a short canary on the engine and with the
trainer's own model: an engine that does not serve what was pushed stops the run, for every backend. The mock's
weight counter (`served_version`, `ServedVersion`) stays as an extra figure (`weights/engine_stale`) and tells the
rollout worker how many versions behind the engine is.

Whichever backend, `FirstSync` wraps it: the first sync is where a wrong transport shows (every later
sync repeats what worked), so it is timed and printed, and its failure becomes one line that names the
transport setting instead of a TRL traceback ending in "unhandled cuda error". A later push that loses the
engine stops the run with a checkpoint (`PushWatch`, trainer/watch/engine_gone.py).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Mapping

import httpx

from stack.backends import WEIGHT_TRANSFERS, load

from ..watch.engine_gone import PushWatch
from .served_check import ServedWeights
from .transfer_wrapper import TransferWrapper

logger = logging.getLogger(__name__)

SAFE_DEFAULT = "NCCL_P2P_DISABLE=1 NCCL_CUMEM_ENABLE=0"


def build(mode: str, engine_url: str, timeout_s: float | None = None):
    """The client its registry entry names (stack/backends.py), or None where AsyncGRPOTrainer builds its own (then
    TRL's `weight_sync_timeout` bounds it). A named client takes `(engine_url, timeout_s=)`: the most one of its
    calls may wait (WEIGHT_SYNC_TIMEOUT_S; the mock's MockWeightTransfer applies it to every request)."""
    client = WEIGHT_TRANSFERS.get(mode).client
    if not client:
        return None
    return load(client)(engine_url) if timeout_s is None else load(client)(engine_url, timeout_s=timeout_s)


def describe_transport(mode: str, env: Mapping[str, str]) -> str:
    """The transfer's summary and the variables that decide its transport, as they are set."""
    entry = WEIGHT_TRANSFERS.get(mode)
    values = " ".join(f"{name}={env.get(name) or '(unset)'}" for name in entry.transport_vars)
    return ", ".join(part for part in (entry.transport, values) if part)


def ipc_advice(env: Mapping[str, str]) -> str:
    """What has to hold for the engine to open the trainer's handles (vLLM's ipc_engine.py, PyTorch's CUDA IPC)."""
    tips = [
        "engine and trainer must see the SAME physical GPU (compose.one-gpu.yaml gives both device 0; the engine "
        "looks its handle up by the GPU's UUID)",
        "both containers need `ipc: host` and one PID namespace (`pid: host`; compose.one-gpu.yaml sets both)",
        "the engine needs VLLM_ALLOW_INSECURE_SERIALIZATION=1 to unpickle the handles (the launcher sets it when "
        "WEIGHT_TRANSFER=ipc reaches the engine: check `docker compose logs engine` for 'Refusing to deserialize')",
    ]
    if "expandable_segments:true" in (env.get("PYTORCH_CUDA_ALLOC_CONF") or "").replace(" ", "").lower():
        tips.append(
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True shares memory through pidfd_getfd, which also needs "
            "ptrace permission between the containers (pytorch issue 165685): try without it"
        )
    return "; ".join(tips)


def transport_advice(mode: str, env: Mapping[str, str]) -> str:
    """What to change, given the transport that just failed (its registry entry names the advice)."""
    advice = WEIGHT_TRANSFERS.get(mode).advice
    return load(advice)(env) if advice else "see `docker compose logs engine` for the engine's side"


def nccl_advice(env: Mapping[str, str]) -> str:
    """What to change after a failed NCCL first sync, given the NCCL variables as set."""
    p2p_off = (env.get("NCCL_P2P_DISABLE") or "").strip() == "1"
    cumem_off = (env.get("NCCL_CUMEM_ENABLE") or "").strip() == "0"
    if not p2p_off:
        return (
            "peer-to-peer between two containers that each see one GPU fails on many hosts (NCCL issue #1647): "
            f"set {SAFE_DEFAULT} in .env (shared memory, 0.229 s per 2.8 GB sync)"
        )
    if not cumem_off:
        return (
            "NCCL_P2P_DISABLE=1 without NCCL_CUMEM_ENABLE=0 failed vLLM's group init when measured: "
            f"set {SAFE_DEFAULT} in .env"
        )
    return (
        "this is the shared-memory transport: both containers need `ipc: host` and the same NCCL_* values "
        "(compose.yaml's x-nccl-env gives them both); NCCL's INIT lines in `docker compose logs trainer engine` "
        "name the channel that failed"
    )


def _root_cause(exc: BaseException) -> BaseException:
    seen = {id(exc)}
    while (exc.__cause__ or exc.__context__) is not None and id(exc.__cause__ or exc.__context__) not in seen:
        exc = exc.__cause__ or exc.__context__
        seen.add(id(exc))
    return exc


def failure_line(phase: str, exc: BaseException, mode: str, env: Mapping[str, str]) -> str:
    root = _root_cause(exc)
    detail = " ".join(f"{type(root).__name__}: {root}".split())[:300]
    return (
        f"trainer: the first weight sync to the engine failed while {phase} ({detail}); "
        f"transport {describe_transport(mode, env)}: {transport_advice(mode, env)}"
    )


class FirstSyncFailed(SystemExit):
    """Exits the trainer with the one line (SystemExit prints it without a traceback)."""


class FirstSync:
    """Any AsyncGRPO weight-transfer backend, with its first sync reported.

    TRL 1.16.0 (`async_grpo_trainer.py`, read at that tag) calls `init_weight_transfer()` once on train
    begin, then `pause()`, `send_weights(iterator)`, `resume()` for the cold sync before any rollout is
    started, and again after every optimizer step; `destroy()` on train end. Everything up to the end of
    that first `resume()` is "the first sync" here.
    """

    def __init__(
        self, inner, mode: str, env: Mapping[str, str], say: Callable[[str], None] = lambda s: print(s, flush=True)
    ):
        self.inner = inner
        self.mode = mode
        self.env = env
        self.say = say
        self.done = False
        self.setup_s: float | None = None
        self.send_s: float | None = None

    def _first(self, phase: str, call: Callable[[], object]):
        if self.done:
            return call()
        try:
            return call()
        except Exception as exc:
            raise FirstSyncFailed(failure_line(phase, exc, self.mode, self.env)) from exc

    def init_weight_transfer(self) -> None:
        self.say(
            f"trainer: weight transfer {self.mode}, transport {describe_transport(self.mode, self.env)}"
            + ("; NCCL's own init lines follow (NCCL_DEBUG)" if WEIGHT_TRANSFERS.get(self.mode).nccl_group else "")
        )
        t0 = time.monotonic()
        self._first("setting up the weight-transfer group", self.inner.init_weight_transfer)
        self.setup_s = time.monotonic() - t0

    def pause(self) -> None:
        self._first("pausing the engine", self.inner.pause)

    def send_weights(self, iterator) -> None:
        t0 = time.monotonic()
        self._first("sending the weights", lambda: self.inner.send_weights(iterator))
        if not self.done:
            self.send_s = time.monotonic() - t0

    def resume(self) -> None:
        self._first("resuming the engine", self.inner.resume)
        if not self.done:
            self.done = True
            setup = "-" if self.setup_s is None else f"{self.setup_s:.2f} s"
            send = "-" if self.send_s is None else f"{self.send_s:.3f} s"
            self.say(f"trainer: first weight sync done: group set up in {setup}, weights sent in {send}")

    def destroy(self) -> None:
        self.inner.destroy()


def chain(backend, s, env: Mapping[str, str], model=None) -> tuple[ServedWeights, ServedVersion, PushWatch]:
    """The backend as the trainer hands it to TRL: ServedWeights(FirstSync(ServedVersion(PushWatch(backend)))), and
    the two inner.

    - ServedWeights, outermost: after each push, the canary scored by the engine and by `model` (the trainer's,
      just pushed); an engine that does not serve it stops the run (WeightsNotServed, an EngineGone), the first
      push included, so its stop is never mistaken for a transport failure by FirstSync;
    - FirstSync: a failing first push is a transport to fix, one line and exit (never waited out);
    - ServedVersion: the engine's weight counter after each of TRL's pushes, where the transfer's engine has one
      (the mock's; an extra figure), and whether vLLM is still paused;
    - PushWatch, innermost: an engine lost in a later push raises EngineGone, and the run stops with a
      checkpoint (trainer/watch/engine_gone.py).
    `s` is the trainer's Settings. ServedVersion's callback logs ServedWeights' figures too."""
    watch = PushWatch(backend, s.engine_url, timeout_s=s.weight_sync_timeout_s)
    served = ServedVersion(watch, s.engine_url, WEIGHT_TRANSFERS.get(s.weight_transfer).version_route)
    check = ServedWeights(FirstSync(served, s.weight_transfer, env), s.engine_url)
    if model is not None:
        check.attach(model)
    served.weights = check
    return check, served, watch


# --- which weights the engine serves after a push ---------------------------------------------------------------


def served_version(engine_url: str, version_route: str = "", timeout_s: float = 10.0) -> tuple[int | None, bool | None]:
    """(weight version the engine reports, whether it is paused), None where it does not say.

    The mock engine counts the weight updates it swapped in (its transfer's `version_route`, `/mock/weight_manifest`
    -> `weight_version`, mock_engine/lm.py `finish_update`); "" asks nothing. vLLM 0.31's dev routes
    (VLLM_SERVER_DEV_MODE=1) report no weight version; what they do report is `/is_paused`, and an engine still
    paused after `resume()` serves nothing new.
    """
    base = engine_url.rstrip("/")
    version = _answer(f"{base}{version_route}", "weight_version", int, timeout_s) if version_route else None
    paused = _answer(f"{base}/is_paused", "is_paused", bool, timeout_s)
    return version, paused


def _answer(url: str, key: str, kind: Callable, timeout_s: float):
    """`kind(json[key])` of the engine's answer at `url`, None where it does not say (no route, an error, no key)."""
    try:
        resp = httpx.get(url, timeout=timeout_s)
        if resp.status_code == 200:
            return kind(resp.json()[key])
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        pass
    return None


class ServedVersion(TransferWrapper):
    """Any weight-transfer backend; after each `resume()` the engine is asked what it serves.

    TRL 1.16.0 bumps its policy version right after `resume()` (`_sync_weight_merged`), and every rollout started
    after that counts as the new version. When the engine did not take the push (its version did not move by one,
    or it is still paused), those rollouts were sampled from the OLD weights: `stale` turns 1 and `lag` says by how
    many pushes, and the trainer logs both (`weights/engine_stale`, `weights/engine_version_lag`) every step.

    `behind` is what the rollout worker is told (worker.HarborRolloutWorker.update_model_version): how many of
    TRL's versions the weights the engine serves NOW are behind the trainer's. Not `lag`: every push sends every
    weight, so a push that lands after one that did not brings the engine fully up to date (behind 0) while its
    update counter stays one short for good (lag 1). Only an engine that reports a version can say; else 0.
    """

    def __init__(
        self,
        inner,
        engine_url: str,
        version_route: str = "",
        probe: Callable[[str], tuple[int | None, bool | None]] | None = None,
    ):
        super().__init__(inner)
        self.engine_url = engine_url
        # The transfer's entry names the engine's version route (stack/backends.py); vLLM has none.
        self.probe = probe or functools.partial(served_version, version_route=version_route)
        self.pushes = 0
        self.base: int | None = None  # the engine's version after the first push
        self.served: int | None = None
        self.lag: int | None = None
        self.stale: float | None = None
        self.behind = 0
        # The served-weights check (served_check.ServedWeights) whose figures this callback logs too (chain).
        self.weights = None

    def resume(self) -> None:
        self.inner.resume()
        self.pushes += 1
        version, paused = self.probe(self.engine_url)
        if version is not None:
            self.behind = 0 if self.served is None or version > self.served else self.behind + 1
            if self.base is None:
                self.base = version - (self.pushes - 1)
            self.served = version
            self.lag = self.base + self.pushes - 1 - version
        stale = bool(self.lag) or paused is True
        self.stale = float(stale) if (version is not None or paused is not None) else None
        if stale:
            logger.warning(
                "weight push %d: the engine serves version %s (expected %s)%s; rollouts started now are sampled "
                "from older weights than TRL's version says",
                self.pushes,
                version,
                None if self.base is None else self.base + self.pushes - 1,
                ", and it is still paused" if paused else "",
            )

    def metrics(self) -> dict[str, float]:
        out = dict(self.weights.metrics()) if self.weights is not None else {}
        if self.stale is not None:
            out["weights/engine_stale"] = self.stale
        if self.lag is not None:
            out["weights/engine_version_lag"] = float(self.lag)
        return out

    def callback(self):
        """A transformers `TrainerCallback` writing `metrics()` into every logged step."""
        from transformers import TrainerCallback

        served = self

        class _ServedVersionCallback(TrainerCallback):
            def on_log(self, args, state, control, logs=None, **kwargs):
                if logs is not None:
                    logs.update(served.metrics())

        return _ServedVersionCallback()
