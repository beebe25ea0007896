"""Where a compose stack's CPU goes while a suite drives it: each service of the project, the sandboxes its
rollouts start, the host's Docker daemons, and the short-lived processes no sampler catches.

Why a ledger of our own and not `docker stats`: a sandbox lives a few seconds, `docker stats` costs a
Docker API round trip per call (itself a share of what it would measure on 2 cores), and it forgets a
container once it is gone. The kernel keeps the sums instead: with the cgroupfs driver every container's
CPU is charged, at the moment it is used, to its own cgroup and to the `docker` cgroup above it, so the
parent's counter still holds a sandbox's seconds after the sandbox and its cgroup are gone. The ledger reads
the parent's counter and each long-lived service's own counter; the sandboxes are the difference (exact,
whatever their lifetimes). The host side is /proc/stat's busy time minus the containers': the daemons
(dockerd, containerd, their shims, fuse-overlayfs, sampled per process) and what is left (each `docker
compose` call Harbor makes per trial, runc, the test process itself).

The stack's peak memory comes from the same samples (each container's cgroup, what `docker stats` reports),
where the suites used to ask `docker stats` every 2 s.

Figures from one run only mean something beside the rollouts they paid for: `per_rollout` divides by the
number the caller counted (the trial folders that finished).
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")
# cgroup v1 with the cgroupfs driver (this machine kind), then the v2 layouts Docker uses with cgroupfs and with
# systemd. Only the first that exists is read.
_V1 = Path("/sys/fs/cgroup/cpuacct/docker")
_V2 = Path("/sys/fs/cgroup/docker")
_V2_SYSTEMD = Path("/sys/fs/cgroup/system.slice")
CONTAINERS = Path("/var/lib/docker/containers")
DAEMONS = ("dockerd", "containerd", "containerd-shim", "containerd-shim-runc-v2", "fuse-overlayfs")


def _v2_usage_s(stat: Path) -> float | None:
    try:
        for line in stat.read_text().splitlines():
            if line.startswith("usage_usec "):
                return int(line.split()[1]) / 1e6
    except OSError:
        return None
    return None


def docker_total_s() -> float | None:
    """Every container's CPU since the daemon started, removed containers included; None where unreadable."""
    try:
        return int((_V1 / "cpuacct.usage").read_text()) / 1e9
    except OSError:
        pass
    if (_V2 / "cpu.stat").exists():
        return _v2_usage_s(_V2 / "cpu.stat")
    # systemd driver: the containers are scopes beside everything else in system.slice; sum the live ones only.
    return None


def container_s(cid: str) -> float | None:
    try:
        return int((_V1 / cid / "cpuacct.usage").read_text()) / 1e9
    except OSError:
        pass
    for stat in (_V2 / cid / "cpu.stat", _V2_SYSTEMD / f"docker-{cid}.scope" / "cpu.stat"):
        if stat.exists():
            return _v2_usage_s(stat)
    return None


def container_memory_bytes(cid: str) -> int | None:
    """What `docker stats` reports as a container's memory: usage less the inactive file cache (read from the
    cgroup, where `docker stats` asks the daemon for the same two numbers)."""
    for folder, usage_name, inactive_name in (
        (Path("/sys/fs/cgroup/memory/docker") / cid, "memory.usage_in_bytes", "total_inactive_file"),
        (_V2 / cid, "memory.current", "inactive_file"),
        (_V2_SYSTEMD / f"docker-{cid}.scope", "memory.current", "inactive_file"),
    ):
        try:
            usage = int((folder / usage_name).read_text())
            stat = dict(line.split() for line in (folder / "memory.stat").read_text().splitlines())
        except (OSError, ValueError):
            continue
        return usage - min(usage, int(stat.get(inactive_name, 0)))
    return None


def host_busy_s() -> float:
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / CLK_TCK


def _live_containers() -> list[str]:
    if _V1.is_dir():
        return [p.name for p in _V1.iterdir() if p.is_dir() and len(p.name) == 64]
    if _V2.is_dir():
        return [p.name for p in _V2.iterdir() if p.is_dir() and len(p.name) == 64]
    return [p.name[7:-6] for p in _V2_SYSTEMD.glob("docker-*.scope")]


def _labels(cid: str) -> dict[str, str]:
    """A container's compose labels from the daemon's own config file (no API call: we are root on a test host)."""
    try:
        return json.loads((CONTAINERS / cid / "config.v2.json").read_text())["Config"].get("Labels") or {}
    except (OSError, ValueError, KeyError):
        return {}


def _daemon_ticks() -> dict[int, tuple[str, int]]:
    out = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        if comm.startswith(DAEMONS):
            rest = stat[stat.rindex(")") + 2 :].split()
            out[int(d.name)] = (comm, int(rest[11]) + int(rest[12]))  # utime + stime
    return out


@dataclass
class CpuLedger:
    """Samples every `interval_s` from `start()` to `stop()`; `report()` gives CPU-seconds by who spent them."""

    project: str
    interval_s: float = 1.0
    available: bool = True
    _t0: float = 0.0
    _t1: float = 0.0
    _docker0: float = 0.0
    _docker1: float = 0.0
    _busy0: float = 0.0
    _busy1: float = 0.0
    # container id -> (first reading, last reading, service); a service's container is read until it is gone.
    _containers: dict[str, list] = field(default_factory=dict)
    _daemons0: dict[int, tuple[str, int]] = field(default_factory=dict)
    _daemons: dict[int, tuple[str, int]] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    # The most memory the project's containers (services and sandboxes) held at one sample.
    peak_mem_bytes: int = 0

    def start(self) -> CpuLedger:
        docker = docker_total_s()
        if docker is None:
            self.available = False
            return self
        self._t0, self._docker0, self._busy0 = time.time(), docker, host_busy_s()
        self._daemons0 = _daemon_ticks()
        self._sample(initial=True)
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def _sample(self, initial: bool = False) -> None:
        memory = 0
        for cid in _live_containers():
            used = container_s(cid)
            if used is None:
                continue
            row = self._containers.get(cid)
            if row is None:
                labels = _labels(cid)
                project = labels.get("com.docker.compose.project", "")
                if project == self.project:
                    who = labels.get("com.docker.compose.service", "?")
                elif project.startswith(self.project + "-"):
                    who = "sandboxes"  # env-server names its sandboxes' projects <stack>--<task>-<id>
                else:
                    who = "other containers"
                # Running at start(): only what it uses from now counts. First seen later: it started in the window,
                # so all it used does.
                self._containers[cid] = [used if initial else 0.0, used, who]
            else:
                row[1] = used
            if self._containers[cid][2] != "other containers":
                memory += container_memory_bytes(cid) or 0
        self.peak_mem_bytes = max(self.peak_mem_bytes, memory)
        for pid, (comm, ticks) in _daemon_ticks().items():
            self._daemons[pid] = (comm, ticks)

    def stop(self) -> None:
        if not self.available:
            return
        self._sample()
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=5)
        self._t1, self._docker1, self._busy1 = time.time(), docker_total_s() or self._docker0, host_busy_s()

    def report(self, rollouts: int) -> dict[str, float]:
        """CPU-seconds in the window by who spent them, plus wall seconds, cores available and per-rollout sums.

        The sandboxes are the `docker` cgroup's total less every other container's sampled use: exact however
        short their lives, as long as no other container ends between two samples (another suite's, run at once)."""
        if not self.available:
            return {}
        by: dict[str, float] = {}
        for first, last, who in self._containers.values():
            by[who] = by.get(who, 0.0) + (last - first)
        containers = self._docker1 - self._docker0
        by["sandboxes"] = containers - sum(v for k, v in by.items() if k != "sandboxes")
        daemons: dict[str, float] = {}
        for pid, (comm, ticks) in self._daemons.items():
            before = self._daemons0.get(pid)
            used = (ticks - (before[1] if before and before[0] == comm else 0)) / CLK_TCK
            key = "fuse-overlayfs" if comm.startswith("fuse-overlayfs") else comm.split("-")[0]
            daemons[key] = daemons.get(key, 0.0) + used
        host = (self._busy1 - self._busy0) - containers
        out = {**by, **{f"host: {k}": v for k, v in daemons.items()}}
        out["host: the rest (docker compose calls, runc, the test)"] = host - sum(daemons.values())
        out["total"] = self._busy1 - self._busy0
        out["wall_s"] = self._t1 - self._t0
        out["cores"] = os.cpu_count() or 1
        if rollouts:
            out["per rollout: sandboxes"] = by["sandboxes"] / rollouts
            out["per rollout: total"] = out["total"] / rollouts
        return out


def summary(figures: dict[str, float], rollouts: int) -> str:
    """One line for a suite's figures: the total, per rollout, then the largest shares."""
    if not figures:
        return "CPU ledger unavailable (no cgroup counters this sampler reads)"
    skip = {"total", "wall_s", "cores", "per rollout: sandboxes", "per rollout: total"}
    shares = sorted(((v, k) for k, v in figures.items() if k not in skip), reverse=True)
    parts = ", ".join(f"{k} {v:.0f}" for v, k in shares if v >= 1)
    busy = figures["total"] / (figures["wall_s"] * figures["cores"]) if figures["wall_s"] else 0
    per = (
        f"; per rollout {figures['per rollout: total']:.1f} CPU-s ({figures['per rollout: sandboxes']:.1f} in its sandbox)"
        if rollouts
        else ""
    )
    return f"{figures['total']:.0f} CPU-s in {figures['wall_s']:.0f} s ({busy:.0%} of {figures['cores']} cores), {rollouts} rollouts{per}: {parts}"
