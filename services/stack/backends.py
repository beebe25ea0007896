"""Sandbox backends (SANDBOX) and tunnel providers (TUNNEL_PROVIDER) as tables: what each one needs.

A new backend or provider is one entry here plus the module that holds its code (a reaper, a discovery
method); preflight, env-server and tunnel-check ask the entry, never compare the name. An unknown name is
one line that lists the known ones (the SANDBOX and TUNNEL_PROVIDER fields take their choices from here).

Code is named by "module:function" and imported only by the service that runs it, so this stays stdlib
only and the trainer image never imports e2b or openenv to read a name.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

from .env import Env, Field

E2B_API_KEY = Field("E2B_API_KEY", "text", "", "E2B API key (env server and preflight only)", secret=True)


@dataclass(frozen=True)
class SandboxBackend:
    name: str
    summary: str  # what it is, for the line that lists the choices
    # Variables that must be set, each with where to get it: preflight and env-server refuse with the same line.
    credentials: tuple[tuple[Field, str], ...] = ()
    # Sandboxes run on this host's Docker daemon: needs the socket, takes local task folders only, shares the
    # trials folder with the host, pre-builds task images, and is refused on Kubernetes.
    host_docker: bool = False
    # "module:function", (prefix) -> (count, problems): removes the sandboxes an earlier run left.
    reaper: str = ""

    def credentials_set(self, read: Env) -> tuple[str, ...]:
        """The names of this backend's credentials that are set (never their values)."""
        return tuple(field.name for field, _ in self.credentials if read.get(field))

    def missing_credentials(self, present: Collection[str]) -> str | None:
        """The one line naming the first credential not in `present`, else None."""
        for field, where in self.credentials:
            if field.name not in present:
                return f"SANDBOX={self.name} needs {field.name}: {where}, or use {SANDBOXES.others(self.name)}"
        return None


@dataclass(frozen=True)
class TunnelProvider:
    name: str
    summary: str
    # The compose profile that starts this provider's container ("": nothing to start).
    compose_profile: str = ""
    # tunnel_check.discover.Discovery's method that finds the public URL.
    discovery: str = ""
    # A tunnel the capture proxy is published through, reaching it on loopback ("direct": the sandbox reaches the
    # proxy's own address, so CAPTURE_HOST may be any address and no tunnel stands in front of it).
    via_tunnel: bool = True
    # The proxy's URL is the operator's DIRECT_URL, not one a tunnel announces.
    needs_direct_url: bool = False
    # TUNNEL_TOKEN + TUNNEL_HOSTNAME make it a named tunnel served at https://<hostname>; else a quick tunnel.
    named_by_hostname: bool = False
    # A quick tunnel's URL and the tunnel's own state are read from its metrics server (TUNNEL_METRICS_PORT) or its
    # log file (TUNNEL_LOG): at least one is needed, and both feed a failed check's hint.
    reports_through_metrics_or_log: bool = False

    def mode(self, named: bool) -> str:
        """The provider as the hand-off records it: cloudflared-quick, cloudflared-named, gradio, direct."""
        if not self.named_by_hostname:
            return self.name
        return f"{self.name}-named" if named else f"{self.name}-quick"


class Registry:
    """Entries by name, in the order they are offered; `get` refuses an unknown name in one line."""

    def __init__(self, variable: str, what: str, *entries, aliases: Mapping[str, str] | None = None):
        self.variable, self.what = variable, what
        self.entries = {entry.name: entry for entry in entries}
        self.aliases = dict(aliases or {})

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.entries)

    @property
    def fix(self) -> str:
        return f"set {self.variable} to one of: " + ", ".join(f"{e.name} ({e.summary})" for e in self.entries.values())

    def others(self, name: str) -> str:
        """`SANDBOX=docker` (or `SANDBOX=a or SANDBOX=b`): what else the operator could set."""
        return " or ".join(f"{self.variable}={n}" for n in self.entries if n != name)

    def get(self, name: str):
        name = self.aliases.get(name, name)
        if name not in self.entries:
            from .env import EnvError

            raise EnvError(f"{self.variable}={name!r} is not a known {self.what}: {self.fix}")
        return self.entries[name]

    def __iter__(self):
        return iter(self.entries.values())


def load(target: str) -> Callable:
    """The function a "module:function" entry names (imported on first use, by the service that runs it)."""
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


SANDBOXES = Registry(
    "SANDBOX",
    "sandbox backend",
    SandboxBackend(
        "e2b",
        "production, E2B's cloud",
        credentials=((E2B_API_KEY, "put your key in .env (E2B_API_KEY=e2b_..., from your E2B dashboard)"),),
        reaper="env_server.sandboxes:reap_e2b",
    ),
    SandboxBackend(
        "docker", "local sandboxes on this host", host_docker=True, reaper="env_server.sandboxes:reap_docker"
    ),
)


@dataclass(frozen=True)
class WeightTransfer:
    name: str
    summary: str
    # The module the trainer image must carry (preflight checks it is importable), and what to do if not.
    requires: str
    missing: str
    # "module:Class", built with the engine URL; "": TRL's AsyncGRPOTrainer builds its own NCCL client.
    client: str = ""
    # The backend `vllm serve --weight-transfer-config` runs (engine/command.py); "": no vLLM (the mock engine).
    engine_backend: str = ""
    # Engine and trainer on one GPU (the one-GPU form, compose.one-gpu.yaml); NCCL cannot put both ranks on one.
    same_gpu: bool = False
    # The engine must unpickle what the trainer sends (VLLM_ALLOW_INSECURE_SERIALIZATION=1): docs/ONE-GPU.md.
    insecure_serialization: bool = False
    # The engine is vLLM, which serves bfloat16: float32 weights train under bfloat16 autocast (stack/sizing/precision.py).
    # The mock engine serves float32, so its form computes in the weights' own dtype.
    serves_bfloat16: bool = False
    # The engine route that reports which weight version it serves ("": the engine has none, e.g. vLLM), polled by
    # the trainer after every push (trainer/transfer/weights.py ServedVersion).
    version_route: str = ""
    # The transport as the first sync's line names it, then the variables that decide it, as set.
    transport: str = ""
    transport_vars: tuple[str, ...] = ()
    # Runs over an NCCL group, whose own init lines (NCCL_DEBUG) follow the first sync's line.
    nccl_group: bool = False
    # "module:function", (env) -> the advice line after a failed first sync; "": look at the engine's log.
    advice: str = ""
    # Where this transfer runs: the compose form the resume steps name (trainer/watch/engine_gone.py).
    compose_form: str = "compose"
    # The CPU form's transfer: the trainer is set up for a CPU (trainer/device/cpu_form.py) and the worker knows it.
    cpu_form: bool = False


WEIGHT_TRANSFERS = Registry(
    "WEIGHT_TRANSFER",
    "weight transfer",
    WeightTransfer(
        "nccl",
        "vLLM's NCCL weight transfer, GPU",
        requires="vllm",
        missing="build the trainer image FROM the vLLM image; the CPU form sets WEIGHT_TRANSFER=mock",
        engine_backend="nccl",
        serves_bfloat16=True,
        # What decides the NCCL transport and rendezvous; compose sets them identically on both containers.
        transport_vars=("NCCL_P2P_DISABLE", "NCCL_CUMEM_ENABLE", "VLLM_HOST_IP", "NCCL_SOCKET_IFNAME"),
        nccl_group=True,
        advice="trainer.transfer.weights:nccl_advice",
    ),
    # vLLM's CUDA-IPC weight transfer (vllm/distributed/weight_transfer/ipc_engine.py): the trainer shares its GPU
    # memory handles with the engine on the same device, the one-GPU form. The handles travel pickled over HTTP.
    WeightTransfer(
        "ipc",
        "vLLM's CUDA-IPC weight transfer, engine and trainer on one GPU",
        requires="vllm",
        missing="build the trainer image FROM the vLLM image; the CPU form sets WEIGHT_TRANSFER=mock",
        client="trainer.transfer.ipc_transfer:IPCWeightTransfer",
        engine_backend="ipc",
        same_gpu=True,
        insecure_serialization=True,
        serves_bfloat16=True,
        # What decides whether the engine can open the trainer's CUDA IPC handles.
        transport="CUDA IPC on one GPU",
        transport_vars=("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "PYTORCH_CUDA_ALLOC_CONF"),
        advice="trainer.transfer.weights:ipc_advice",
        compose_form="compose-one-gpu",
    ),
    # Named, not imported: the GPU trainer image does not carry the CPU form's mock engine.
    WeightTransfer(
        "mock",
        "the mock engine's HTTP backend, the CPU form",
        requires="mock_engine.weight_client",
        missing="the CPU trainer image is built FROM the mock-engine image; on GPU use WEIGHT_TRANSFER=nccl",
        client="mock_engine.weight_client:MockWeightTransfer",
        transport="mock (the mock engine's HTTP backend)",
        version_route="/mock/weight_manifest",
        compose_form="compose-cpu",
        cpu_form=True,
    ),
)

TUNNEL_PROVIDERS = Registry(
    "TUNNEL_PROVIDER",
    "tunnel provider",
    TunnelProvider(
        "cloudflared",
        "a quick tunnel, or a named one with TUNNEL_TOKEN + TUNNEL_HOSTNAME",
        compose_profile="cloudflared",
        discovery="cloudflared",
        named_by_hostname=True,
        reports_through_metrics_or_log=True,
    ),
    TunnelProvider("gradio", "OpenEnv's share link", discovery="gradio"),
    TunnelProvider(
        "direct",
        "DIRECT_URL the sandbox can already route to",
        discovery="direct",
        via_tunnel=False,
        needs_direct_url=True,
    ),
    # OpenEnv's make_forwarder spells cloudflared this way; accepted, recorded under our spelling.
    aliases={"cloudflare": "cloudflared"},
)
