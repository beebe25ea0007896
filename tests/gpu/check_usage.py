"""GPU memory per process and the GPU's busy fraction, sampled every second over the GPU check.

Read through NVML (`pynvml`, from the nvidia-ml-py package the GPU machine's image carries); through
`nvidia-smi --query-gpu/--query-compute-apps` where that binding is missing. Per GPU: memory used and NVML's
utilization (the percent of the last sample period in which a kernel ran: the busy fraction). Per process: the
memory NVML lists for it, attributed to the check's roles (engine, trainer, the check itself) by walking each
role's process tree (/proc), so vLLM's engine-core child counts as the engine. In one-GPU form the card's total is the sum
of both, so the per-process figure is the only one that says which side took what.

NVML lists processes by the PID it sees; inside a container without the host's PID namespace those PIDs are not
the check's, and such memory is kept as `pid N (not the check's)` rather than guessed. A read that fails is
counted and its first error kept (the figure then says so), never raised into the check.
"""

from __future__ import annotations

import statistics
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

MIB = 2**20


@dataclass
class Reading:
    gpus: dict[int, tuple[int, int | None]]  # index -> (memory used MiB, busy %)
    procs: list[tuple[int, int, int | None]]  # (gpu index, pid, memory MiB or None where NVML cannot say)
    card_mib: dict[int, int] = field(default_factory=dict)  # index -> total memory MiB


def nvml_reader() -> Callable[[], Reading] | None:
    """A reader over NVML, or None where pynvml cannot be imported or NVML will not start."""
    try:
        import pynvml

        pynvml.nvmlInit()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    except Exception:  # noqa: BLE001 -- no binding, no driver: the nvidia-smi reader answers instead
        return None

    def read() -> Reading:
        gpus, procs, cards = {}, [], {}
        for i, h in enumerate(handles):
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            gpus[i] = (mem.used // MIB, pynvml.nvmlDeviceGetUtilizationRates(h).gpu)
            cards[i] = mem.total // MIB
            for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h):
                used = p.usedGpuMemory
                # None, or NVML_VALUE_NOT_AVAILABLE (2**64 - 1) where a binding passes it on: NVML cannot say.
                known = used is not None and used < 2**63
                procs.append((i, p.pid, used // MIB if known else None))
        return Reading(gpus, procs, cards)

    read.source = "NVML (pynvml)"
    return read


def smi_reader() -> Callable[[], Reading]:
    def query(what: str, fields: str) -> list[list[str]]:
        out = subprocess.run(
            ["nvidia-smi", f"--query-{what}={fields}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
        return [[c.strip() for c in line.split(",")] for line in out.strip().splitlines() if line.strip()]

    def read() -> Reading:
        gpus, cards = {}, {}
        uuids = {}
        for index, uuid, used, total, busy in query("gpu", "index,uuid,memory.used,memory.total,utilization.gpu"):
            gpus[int(index)] = (int(used), int(busy) if busy.isdigit() else None)
            cards[int(index)] = int(total)
            uuids[uuid] = int(index)
        procs = []
        for uuid, pid, used in query("compute-apps", "gpu_uuid,pid,used_memory"):
            procs.append((uuids.get(uuid, -1), int(pid), int(used) if used.isdigit() else None))
        return Reading(gpus, procs, cards)

    read.source = "nvidia-smi"
    return read


def parents(proc: Path = Path("/proc")) -> dict[int, int]:
    """{pid: parent pid} of every process this one can see (Linux /proc; stdlib, so the CPU host tests it too)."""
    out = {}
    for stat in proc.glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # exited between the listing and the read
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after its last ")".
        fields = text[text.rindex(")") + 2 :].split()
        out[int(stat.parent.name)] = int(fields[1])
    return out


def process_roles(roots: dict[int, str], parent_of: Callable[[], dict[int, int]] = parents) -> dict[int, str]:
    """{pid: role} for every process under each root (vLLM's engine core is a child of `vllm serve`)."""
    roles = dict(roots)
    children: dict[int, list[int]] = {}
    for pid, ppid in parent_of().items():
        children.setdefault(ppid, []).append(pid)
    for root, role in roots.items():
        todo = list(children.get(root, ()))
        while todo:
            pid = todo.pop()
            if pid not in roles:
                roles[pid] = role
                todo += children.get(pid, ())
    return roles


class Usage:
    """Samples `read()` every `period_s` in a thread; `summary()` is what goes into gpu-check.json."""

    def __init__(
        self,
        read: Callable[[], Reading],
        roles: Callable[[], dict[int, str]],
        period_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.read, self.roles, self.period_s, self.clock = read, roles, period_s, clock
        self.t0 = clock()
        self.peak_gpu: dict[int, int] = {}
        self.card_mib: dict[int, int] = {}
        self.peak_role: dict[str, int] = {}
        self.role_unknown_mib: set[str] = set()  # roles NVML listed without a memory figure
        self.busy: list[tuple[float, int, int]] = []  # (seconds since start, gpu, busy %)
        self.samples = 0
        self.proc_samples = 0  # samples in which NVML listed at least one process
        self.errors = 0
        self.first_error = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def sample(self) -> Reading | None:
        try:
            reading = self.read()
        except Exception as exc:  # noqa: BLE001 -- a failed read is a figure ("errors"), not a failed check
            self.errors += 1
            self.first_error = self.first_error or f"{type(exc).__name__}: {exc}"
            return None
        t = self.now()
        self.samples += 1
        self.card_mib |= reading.card_mib
        for gpu, (used, busy) in reading.gpus.items():
            self.peak_gpu[gpu] = max(self.peak_gpu.get(gpu, 0), used)
            if busy is not None:
                self.busy.append((t, gpu, busy))
        if reading.procs:
            self.proc_samples += 1
            roles = self.roles()
            now: dict[str, int] = {}
            for _gpu, pid, mib in reading.procs:
                role = roles.get(pid, f"pid {pid} (not the check's)")
                if mib is None:
                    self.role_unknown_mib.add(role)
                now[role] = now.get(role, 0) + (mib or 0)
            for role, mib in now.items():
                self.peak_role[role] = max(self.peak_role.get(role, 0), mib)
        return reading

    def _loop(self):
        while not self._stop.wait(self.period_s):
            self.sample()

    def start(self) -> Usage:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def now(self) -> float:
        """Seconds since the sampler started: the time base of the busy series and of the check's phases."""
        return round(self.clock() - self.t0, 1)

    def busy_mean(self, start: float = 0.0, end: float = float("inf"), gpu: int | None = None) -> float | None:
        values = [b for t, g, b in self.busy if start <= t <= end and (gpu is None or g == gpu)]
        return round(statistics.fmean(values), 1) if values else None

    def summary(self, phases: dict[str, tuple[float, float]], source: str) -> dict:
        """Peaks and busy fractions; `phases` maps a phase to its (start, end) seconds since the sampler started."""
        per_process: dict | str = dict(self.peak_role)
        if not self.samples:
            per_process = (
                f"unavailable: no reading of {source} succeeded ({self.errors} failed; first: {self.first_error})"
            )
        elif not self.proc_samples:
            per_process = (
                f"unavailable: {source} listed no compute process in {self.samples} samples (a PID namespace or a "
                "sandbox that hides them); the trainer's own torch peak is in trainer_torch_peak_mib"
            )
        return {
            "source": source,
            "samples": self.samples,
            "read_errors": self.errors,
            "first_read_error": self.first_error,
            "card_mib": dict(self.card_mib),
            "gpu_peak_mib": dict(self.peak_gpu),
            "process_peak_mib": per_process,
            "process_memory_not_reported": sorted(self.role_unknown_mib),
            "busy_pct_mean": {
                "whole run": self.busy_mean(),
                **{name: self.busy_mean(a, b) for name, (a, b) in phases.items()},
            },
            "busy_pct_series": [[t, g, b] for t, g, b in self.busy],
        }


def start(roots: Callable[[], dict[int, str]]) -> tuple[Usage, str]:
    """A running sampler over NVML (nvidia-smi without it), and which of the two it reads."""
    read = nvml_reader() or smi_reader()
    usage = Usage(read, lambda: process_roles(roots()))
    usage.sample()
    return usage.start(), read.source
