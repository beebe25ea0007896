"""The guard checks. Each returns None, one line or a list of lines, each saying what is wrong AND how
to fix it.

They read a plain mapping (the environment) through the same field tables the services start with
(stack.fields, stack.readers.trainer, ...), and take their probes (mountinfo path, GPU counter, socket path) as
arguments, so every check can be triggered by a test without a GPU or a bucket.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from stack import datasets as task_check
from stack import fields, mountinfo, names, space
from stack.backends import SANDBOXES, TUNNEL_PROVIDERS, WEIGHT_TRANSFERS
from stack.env import Env, EnvError, Field, Table
from stack.facts import BUCKET_OPT_OUT_PHRASE

from . import cluster, disk, gpu_fit, ports
from .bucket import bucket_verdict

OPT_OUT_PHRASE = BUCKET_OPT_OUT_PHRASE
F = fields
# Preflight's own settings, and the shared ones its checks read. The trainer's are read by its own reader
# (check_trainer_settings), the stop rules' by theirs: one rule, one place.
FIELDS = Table(
    Field(
        "REQUIRED_GPUS",
        "integer",
        2,
        "GPUs preflight requires on this host",
        fix="set it to the GPUs this host must have (2; 1 in the one-GPU form; 0 in the CPU form)",
        minimum=0,
        # No single host has more (8 on an HGX board, 16 on the largest); a count no host has is a typo.
        maximum=64,
        fix_above="set it to the GPUs this host must have, at most 64 (2; 1 in the one-GPU form; 0 in the CPU form)",
    ),
    # 100 TB, TRIALS_MAX_GB's bound too: a floor no disk can meet refuses every run.
    Field(
        "MIN_FREE_DISK_GB",
        "integer",
        0,
        "a floor, in GB, under the free space the disk guard sizes",
        minimum=0,
        maximum=100_000,
    ),
    Field("COMPOSE_PROFILES", "words", (), "compose profiles; cloudflared exactly when TUNNEL_PROVIDER=cloudflared"),
    F.BUCKET_DIR,
    F.BUCKET_NOT_A_MOUNT_OK,
    F.HF_HOME,
    F.CHECKPOINT_ROOT,
    F.SANDBOX,
    F.E2B_API_KEY,
    F.PORTS,
    F.TUNNEL_PROVIDER,
    F.TRAIN_SCRIPT,
    F.RUN_NAME,
    F.WEIGHT_TRANSFER,
    F.DEPLOYMENT,
)


class Settings(Mapping):
    """Preflight's settings, read once through FIELDS (a bad value reads as its default, its line kept in
    `refusals`), over the raw environment, which the checks hand on to the readers they call (the trainer's,
    DEPLOYMENT's) and read the launcher's own variables from."""

    def __init__(self, env: Mapping[str, str]):
        self.env = env
        read = Env(env, collect=True)
        self.values, self.refusals = {}, {}
        for field in FIELDS:
            before = len(read.problems)
            self.values[field.name] = read.get(field)
            if len(read.problems) > before:
                self.refusals[field.name] = read.problems[-1]
        self.read = read  # for variables that are not settings of this stack (WORLD_SIZE, ...)

    def __getitem__(self, name: str) -> str:
        return self.env[name]

    def __iter__(self):
        return iter(self.env)

    def __len__(self) -> int:
        return len(self.env)

    def value(self, name: str):
        return self.values[name]

    def trainer(self):
        """The trainer's own settings and problems (stack.readers.trainer.read), read once for every check."""
        if not hasattr(self, "_trainer"):
            from stack.readers.trainer import read

            self._trainer = read(self.env)
        return self._trainer

    def checked(self, name: str):
        """The value, or EnvError with its one line (for a check that owns the setting)."""
        if name in self.refusals:
            raise EnvError(self.refusals[name])
        return self.values[name]


def _get(env: Settings, name: str):
    """A field as the services read it; a bad value reads as its default here, because the check that
    owns it (trainer-settings, or the service) reports it."""
    return env.value(name)


RUN_NAME_RE = names.NAME_RE


@dataclass(frozen=True)
class Failure:
    check: str
    message: str

    def __str__(self) -> str:
        return f"[{self.check}] {self.message}"


@dataclass
class Probes:
    """What the checks look at on the machine. Tests replace these; production uses the defaults."""

    mountinfo_path: str = mountinfo.MOUNTINFO
    docker_socket: str = "/var/run/docker.sock"
    gpu_count: Callable[[], tuple[int, str]] | None = None
    visible_gpus: Callable[[], tuple[int, str]] | None = None
    rename: Callable[[str, str], None] | None = None
    model_size: Callable | None = None  # (model, hf_home) -> disk.ModelSize | None
    free_bytes: Callable[[str], int] | None = None
    port_owner: Callable | None = None  # (env) -> ports.Owners
    gpu_memory_gib: Callable[[], tuple[float | None, str]] | None = None  # GPU 0's total memory (gpu_fit.py)


def count_gpus() -> tuple[int, str]:
    """(GPUs visible, how they were counted). nvidia-smi first: it needs no torch import."""
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
            if out.returncode == 0:
                return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU ")), "nvidia-smi"
        except (OSError, subprocess.TimeoutExpired):
            pass
    try:
        import torch

        return torch.cuda.device_count(), "torch.cuda"
    except Exception:  # no torch (host venv) or a broken CUDA runtime: either way, no usable GPU
        return 0, "no nvidia-smi and no torch"


def check_bucket_mount(env, probes):
    bucket = _get(env, "BUCKET_DIR")
    if env.checked("BUCKET_NOT_A_MOUNT_OK"):
        return None
    try:
        mounts = mountinfo.read(probes.mountinfo_path)
    except OSError as exc:
        return f"cannot read {probes.mountinfo_path} ({exc.strerror}) to inspect {bucket}: run on Linux, or set BUCKET_NOT_A_MOUNT_OK={OPT_OUT_PHRASE}"
    ok, why = bucket_verdict(mounts, os.path.realpath(bucket), kubernetes=cluster.on_kubernetes(env))
    if ok:
        return None
    return (
        f"bucket {bucket} is not a real mount: {why}. {cluster.bucket_fix(env)}, "
        f"or set BUCKET_NOT_A_MOUNT_OK={OPT_OUT_PHRASE} to train into a plain folder"
    )


def check_bucket_writable(env, probes):
    bucket = _get(env, "BUCKET_DIR")
    if os.path.exists(bucket) and not os.path.isdir(bucket):
        return f"bucket {bucket} is a file, not a folder: bind the host's BUCKET_PATH (a folder) to {bucket}"
    if not os.path.isdir(bucket):
        return f"bucket {bucket} does not exist in the container: bind the host's BUCKET_PATH to {bucket}"
    try:
        fd, tmp = tempfile.mkstemp(dir=bucket, prefix=".preflight-")
        with os.fdopen(fd, "wb") as fh:
            fh.write(b"ok")
    except OSError as exc:
        return (
            f"bucket {bucket} is not writable ({exc.strerror}): give the container's user write access on the host "
            f"(chown/chmod BUCKET_PATH) and mount it read-write"
        )
    # status.json, the hand-off and every checkpoint's files are written by rename (atomic: a reader never
    # sees half a file). Object-store FUSE mounts (mountpoint-s3, some gcsfuse modes) cannot rename: there
    # the first status write fails, after the engine has loaded (measured).
    renamed = tmp + ".renamed"
    try:
        (probes.rename or os.replace)(tmp, renamed)
    except OSError as exc:
        return (
            f"bucket {bucket} cannot rename files ({exc.strerror or exc}): status.json and checkpoints are written "
            "by rename, so the run would fail at its first write. Mount the bucket with a filesystem that renames "
            "(a disk, NFS, gcsfuse with rename support), or stage it: BUCKET_PATH on a local disk synced to the "
            "object store"
        )
    finally:
        for leftover in (tmp, renamed):
            with contextlib.suppress(OSError):
                os.unlink(leftover)
    return None


def _under(path: str, root: str) -> bool:
    path, root = os.path.normpath(path), os.path.normpath(root)
    return path == root or path.startswith(root.rstrip("/") + "/")


def check_hf_home(env, probes):
    bucket, hf_home = _get(env, "BUCKET_DIR"), _get(env, "HF_HOME")
    if not hf_home:
        return f"HF_HOME is not set: set HF_HOME={bucket}/hf-home so the model cache survives the VM"
    if not _under(hf_home, bucket):
        return (
            f"HF_HOME={hf_home} is not on the bucket: set HF_HOME={bucket}/hf-home so the model cache survives the VM"
        )
    return None


def check_checkpoints(env, probes):
    bucket = _get(env, "BUCKET_DIR")
    out = _get(env, "CHECKPOINT_ROOT") or f"{bucket}/checkpoints"
    if not _under(out, bucket):
        return f"CHECKPOINT_ROOT={out} is not on the bucket: unset it (checkpoints go to {bucket}/checkpoints)"
    return None


def check_sandbox(env, probes):
    # The same allowed values env-server starts with: a sandbox it would refuse is refused here first.
    backend = SANDBOXES.get(env.checked("SANDBOX"))
    # A credential that is set but refused (a newline in the key) is that line, not "needs E2B_API_KEY".
    if refused := [env.refusals[f.name] for f, _ in backend.credentials if f.name in env.refusals]:
        return refused
    if missing := backend.missing_credentials(backend.credentials_set(env.read)):
        return missing
    if backend.host_docker:
        if cluster.on_kubernetes(env):
            return cluster.DOCKER_SANDBOX_REFUSED
        path = probes.docker_socket
        try:
            is_socket = stat.S_ISSOCK(os.stat(path).st_mode)
        except OSError:
            is_socket = False
        if not is_socket:
            return (
                f"SANDBOX={backend.name} needs the Docker socket at {path}: mount /var/run/docker.sock into this "
                f"container, or use {SANDBOXES.others(backend.name)}"
            )
    return None


def check_ports(env, probes):
    problems = [env.refusals[f.name] for f in fields.PORTS if f.name in env.refusals]
    seen: dict[int, str] = {}
    owners = None  # asked of Docker only when a port is held
    for field in fields.PORTS:
        name = field.name
        if name in env.refusals:
            continue
        port = env.value(name)
        if port in seen:
            problems.append(f"{name} and {seen[port]} are both {port}: give each service its own port")
            continue
        seen[port] = name
        if cluster.on_kubernetes(env):
            continue  # a pod's ports are its own: nothing else on the node can hold them
        if _port_free(port):
            continue
        if owners is None:
            owners = (probes.port_owner or (lambda: ports.stack_owners(probes.docker_socket, probes.mountinfo_path)))()
        service = ports.PORT_SERVICES[name]
        if owners.project and service in owners.running:
            # This stack's own running service: `docker compose up -d <another service>` re-runs preflight
            # while the rest of the stack is up, and must not be refused for it.
            print(f"preflight: port {port} ({name}) is held by this stack's running {service} ({owners.project})")
            continue
        unknown = f" (preflight cannot tell this stack's services from others: {owners.why})" if owners.why else ""
        problems.append(
            f"port {port} ({name}) is already in use on this host by something other than this stack's {service}"
            f"{unknown}: stop what holds it (`ss -ltnp 'sport = :{port}'`) or set {name} to a free port"
        )
    return problems  # one line per port


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            # The services bind with SO_REUSEADDR, so a port held only by TIME_WAIT leftovers of a
            # stack just stopped is free for them: without it preflight refused a prompt `up` after `down`.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def check_disk(env, probes):
    """Free space for the model cache and the checkpoints this run keeps (guards/disk.py says how it is
    sized); MIN_FREE_DISK_GB, when set, is a floor under that figure."""
    floor_gb = env.checked("MIN_FREE_DISK_GB")
    settings, _problems = env.trainer()  # bad values read as their defaults; trainer-settings reports them
    hf_home = _get(env, "HF_HOME")
    where = hf_home or settings.bucket_dir
    size = (probes.model_size or disk.model_size)(settings.model, hf_home)
    if size is None:
        need, why = (
            floor_gb * 10**9,
            (
                f"MIN_FREE_DISK_GB={floor_gb} (the size of {settings.model} is unknown here: not a local folder, "
                "not in HF_HOME, and the Hub did not answer)"
            ),
        )
    else:
        need, why = disk.needed_bytes(size, settings.dtype, settings.save_total_limit)
        if floor_gb * 10**9 > need:
            need, why = floor_gb * 10**9, f"MIN_FREE_DISK_GB={floor_gb} (above the {need / 1e9:.1f} GB of {why})"
    free = (probes.free_bytes or space.free_bytes_at)(where)
    if free < need:
        return (
            f"{free / 1e9:.1f} GB free at {where}, need {need / 1e9:.1f} GB: {why}. Free space on the bucket, "
            "lower SAVE_TOTAL_LIMIT, or use a smaller model"
        )
    return None


def check_trials_disk(env, probes):
    """The env server's trials folder can keep what TRIALS_MAX_GB promises (env_server/trials.py, which the env
    server checks again at its start, exactly).

    Where preflight looks: under compose the env server keeps TRIALS_DIR in its container's own layer, on Docker's
    disk, and preflight's container sees that same disk at the same path (not made yet: its nearest folder, `/`);
    the CPU form mounts the host folder into both. Finished trial folders already there count toward the cap, as
    the env server counts this stack's (preflight cannot tell which stack a folder is of). On Kubernetes the folder
    is the env-server pod's emptyDir: the chart refuses a TRIALS_MAX_GB at or past its sizeLimit (envServer.trialsSize)
    and the env server's own start checks the node's disk."""
    if cluster.on_kubernetes(env):
        return None
    from stack.readers.env_server import FIELDS as ENV_SERVER_FIELDS

    read = Env(env.env, collect=True)  # a bad value is env-server-settings' line; its default is checked here
    trials_dir = read.get(ENV_SERVER_FIELDS["TRIALS_DIR"])
    max_gb = read.get(ENV_SERVER_FIELDS["TRIALS_MAX_GB"])
    free = (probes.free_bytes or space.free_bytes_at)(trials_dir)
    held = space.folder_bytes(trials_dir) if os.path.isdir(trials_dir) else 0
    return space.space_problem(trials_dir, max_gb, free, held)


def check_tunnel(env, probes):
    provider = TUNNEL_PROVIDERS.get(env.checked("TUNNEL_PROVIDER"))
    profiles = set(_get(env, "COMPOSE_PROFILES"))
    if cluster.on_kubernetes(env):
        return None  # the chart runs cloudflared exactly when TUNNEL_PROVIDER=cloudflared
    wanted = provider.compose_profile
    if wanted and wanted not in profiles:
        return (
            f"TUNNEL_PROVIDER={provider.name} but COMPOSE_PROFILES does not contain {wanted}, so no tunnel would "
            f"start: set COMPOSE_PROFILES={wanted}"
        )
    for unused in sorted({p.compose_profile for p in TUNNEL_PROVIDERS if p.compose_profile != wanted} & profiles):
        return (
            f"TUNNEL_PROVIDER={provider.name} but COMPOSE_PROFILES contains {unused}, which would start an unused "
            f"public tunnel: remove {unused} from COMPOSE_PROFILES"
        )
    return None


def check_train_script(env, probes):
    spec = _get(env, "TRAIN_SCRIPT")
    if not spec:
        return None
    # The trainer's own resolve (trainer/train_script.py): the fetch needs requests, which stack does not carry.
    return _trainer_check("trainer.train_script", [spec], env, timeout_s=120)


def _trainer_check(
    module: str, args: list[str], env: Settings, given: Mapping[str, str] | None = None, timeout_s: float = 120
) -> str | None:
    """Run `python -m <module> ARGS`, a check the trainer runs as a process of its own (what it needs is the
    trainer's, not stack's; the trainer image carries both packages, so it is found beside guards). The child
    gets the environment this preflight read (`env`), `given` over it. Exit 1: its stdout is the finding's one
    line. Exit 0: no finding, and what it printed on the way is printed here, as it was when guards called the
    check itself. Anything else is a crash."""
    # Only the services folder: the interpreter brings its own site-packages.
    services = str(Path(__file__).resolve().parents[1])
    run = subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={**env.env, **(given or {}), "PYTHONPATH": services},
    )
    if run.returncode == 1 and run.stdout.strip():
        return run.stdout.strip()
    if run.returncode:
        raise RuntimeError(f"python -m {module} exited {run.returncode}: {run.stderr.strip()[-500:]}")
    if run.stdout:
        print(run.stdout, end="", flush=True)
    return None


def check_trainer_settings(env, probes):
    """Every trainer setting, one line each, from the trainer's own reader (stack/readers/trainer.py)."""
    return env.trainer()[1] or None


def check_env_server_settings(env, probes):
    """Every env-server setting (the capture port's CAPTURE_*, TASK_ENV_ALLOW, DIRECT_URL, ...), one line each,
    from env-server's own reader (stack/readers/env_server.py): otherwise they are refused only when env-server
    starts, after preflight said the stack was fine."""
    from stack.readers.env_server import Settings as EnvServerSettings

    EnvServerSettings.from_env(env.env)  # EnvError: its lines are the findings
    return None


def check_tunnel_settings(env, probes):
    """tunnel-check's settings (TUNNEL_CHECK_*, DIRECT_URL, TUNNEL_HOSTNAME, ...), every bad one a line, from its
    own reader (stack/readers/tunnel_check.py)."""
    from stack.readers import tunnel_check as tunnel_settings

    # Values preflight's own fields already refused (the ports, TUNNEL_PROVIDER) read as their defaults here: their
    # line is preflight's (with its default), not tunnel-check's wording of it again.
    view = {name: "" if name in env.refusals else value for name, value in env.env.items()}
    # What compose gives tunnel-check and not preflight: the metrics port it gives cloudflared (the field's
    # default, tests/unit/test_settings_tables.py) and TUNNEL_NAMED from the token preflight does hold.
    view["TUNNEL_METRICS_PORT"] = view.get("TUNNEL_METRICS_PORT") or str(fields.TUNNEL_METRICS_PORT.default)
    if "TUNNEL_TOKEN" in view:
        view["TUNNEL_NAMED"] = "1" if view["TUNNEL_TOKEN"].strip() else ""
    return tunnel_settings.read(view)[1] or None


def check_trainer_healthcheck(env, probes):
    """TRAINER_STALE_S, from the trainer healthcheck's own field (stack/readers/trainer_health.py): a bad value would
    otherwise only show as an unhealthy trainer once it runs."""
    from stack.readers import trainer_health

    read = Env(env.env, collect=True)
    read.get(trainer_health.STALE_S)
    return read.problems or None


def check_stop_rules(env, probes):
    """The stop rules' thresholds and window (STOP_*), one line each, from the trainer's own reader
    (stack/readers/stop_rules.py): a bad value would otherwise stop the trainer after the engine is paid for."""
    from stack.readers import stop_rules

    return stop_rules.problems(env) or None


def check_report_to(env, probes):
    """REPORT_TO=wandb without its key: the trainer would refuse at start (stack/readers/reporting.py). A REPORT_TO
    outside the choices is trainer-settings' line, not this one's.

    The key is a secret of the trainer alone: preflight is told only whether it is set (WANDB_API_KEY_SET,
    empty when not). Where neither variable exists at all, this process cannot know, and says nothing: the
    trainer, which holds the key, refuses with the same line."""
    from stack.readers import reporting

    if "WANDB_API_KEY" not in env and reporting.KEY_SET not in env:
        return None
    try:
        return reporting.missing_key(env.read.get(fields.REPORT_TO), env)
    except EnvError:
        return None


def check_trainer_gpus(env, probes):
    """One visible GPU per trainer process, unless a distributed launcher started it.

    With two GPUs visible the Hugging Face Trainer wraps the model in DataParallel and TRL's packed
    batch of one fails the first step with "batch size must be positive" (reproduced on a 2-GPU machine).
    """
    # The launcher's own variables (torchrun, accelerate), not settings of this stack.
    launcher = env.read
    if launcher.text("WORLD_SIZE") or launcher.text("LOCAL_RANK"):
        return None
    found, how = (probes.visible_gpus or visible_gpus)()
    if found <= 1:
        return None
    return (
        f"the trainer sees {found} GPUs ({how}; CUDA_VISIBLE_DEVICES={launcher.text('CUDA_VISIBLE_DEVICES')!r}) "
        "but was not started by a distributed launcher (no WORLD_SIZE/LOCAL_RANK): give it one GPU "
        "(TRAINER_GPUS=1, one device id), or launch it with accelerate launch/torchrun through TRAIN_SCRIPT"
    )


def visible_gpus() -> tuple[int, str]:
    """GPUs this process can use: torch honours CUDA_VISIBLE_DEVICES, nvidia-smi does not."""
    try:
        import torch

        return torch.cuda.device_count(), "torch.cuda.device_count()"
    except Exception:  # noqa: BLE001 -- no torch (host venv) or no driver: no GPU to misuse
        return 0, "no torch"


def check_hub_access(env, probes):
    """HUB_MODEL_ID set: the token can write it (trainer/hub/hub_access.py). Trainer phase only: HUB_TOKEN is a
    secret of the trainer alone. A malformed HUB_MODEL_ID is trainer-settings' line (it reads as empty here)."""
    settings, _problems = env.trainer()
    if not settings.hub.model_id:
        return None
    hub = settings.hub
    # The trainer's own question (trainer/hub/hub_access.py): it asks through huggingface_hub, which stack does not
    # carry. The settings travel as read here, so the child judges exactly what this process read.
    given = {"HUB_MODEL_ID": hub.model_id, "HUB_TOKEN": hub.token, "HF_ENDPOINT": hub.endpoint}
    return _trainer_check("trainer.hub.hub_access", [], env, given, timeout_s=300)


def check_run_name(env, probes):
    """RUN_NAME by the one rule for names that become folders (stack/names.py), and not on a file where the trainer
    makes its folder (it died there with a FileExistsError traceback). STACK_NAME is env-server-settings' line."""
    name, bucket = _get(env, "RUN_NAME"), _get(env, "BUCKET_DIR")
    if not name:
        return None
    root = _get(env, "CHECKPOINT_ROOT") or f"{bucket}/checkpoints"
    return names.problem("RUN_NAME", name, root, fix="or leave it empty for a fresh name")


def check_resume(env, probes):
    """An explicit RUN_NAME whose every checkpoint is broken (stack/resume.py): refused here, before the engine
    loads, in the line the trainer would stop with. A broken newest one with an older that loads is passed over
    by the trainer (it names it), not refused."""
    settings, _problems = env.trainer()
    if not settings.run_name_explicit:
        return None
    from stack.resume import pick

    pick(settings.run_dir)  # EnvError: its line is the finding
    return None


def _count(env, name: str) -> int | None:
    """A positive whole number set in `env`, else None (a bad value is its own service's line)."""
    raw = env.read.text(name)
    return int(raw) if raw.isdigit() and int(raw) > 0 else None


def check_engine_parallel(env, probes):
    """The engine's ENGINE_TENSOR_PARALLEL_SIZE x ENGINE_DATA_PARALLEL_SIZE against the GPUs compose gives it
    (ENGINE_GPUS): vLLM places one rank per GPU and fails at start, after the model download, when they differ.
    The sizes are the engine's fields (engine/command.py, not in this image): a bad value is the engine's line."""
    gpus = [g for g in env.read.text("ENGINE_GPUS").split(",") if g.strip()]
    if not gpus or cluster.on_kubernetes(env):
        return None  # on Kubernetes the chart sets the engine's GPUs from the same values (deploy/helm)
    tp = _count(env, "ENGINE_TENSOR_PARALLEL_SIZE") or 1
    dp = _count(env, "ENGINE_DATA_PARALLEL_SIZE") or 1
    if tp * dp != len(gpus):
        return (
            f"ENGINE_TENSOR_PARALLEL_SIZE={tp} x ENGINE_DATA_PARALLEL_SIZE={dp} needs {tp * dp} engine GPU(s) but "
            f"ENGINE_GPUS={','.join(g.strip() for g in gpus)} gives it {len(gpus)}: list {tp * dp} device id(s) in "
            "ENGINE_GPUS, or set the sizes so TP x DP equals their number"
        )
    return None


_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?$")


def check_stop_grace(env, probes):
    """env-server closes its sandboxes within ENV_SERVER_SHUTDOWN_GRACE_S of a stop; compose kills it after
    ENV_SERVER_STOP_GRACE (a Docker duration, e.g. 90s). A closing time at or past the kill leaves sandboxes
    running (and billing) after the process is gone."""
    if cluster.on_kubernetes(env):
        return None  # the chart refuses it against envServer.terminationGracePeriodSeconds at render
    raw = env.read.text("ENV_SERVER_STOP_GRACE")
    match = _DURATION.match(raw.replace(" ", "")) if raw else None
    if not raw or not match or not any(match.groups()):
        return None if not raw else f"ENV_SERVER_STOP_GRACE={raw!r} is not a Docker duration: set it like 90s or 2m"
    h, m, sec = (float(g or 0) for g in match.groups())
    stop_s = h * 3600 + m * 60 + sec
    from stack.readers.env_server import FIELDS as ENV_SERVER_FIELDS

    grace = Env(env.env, collect=True).get(ENV_SERVER_FIELDS["ENV_SERVER_SHUTDOWN_GRACE_S"])
    if grace >= stop_s:
        return (
            f"ENV_SERVER_SHUTDOWN_GRACE_S={grace:g} is not below ENV_SERVER_STOP_GRACE={raw} ({stop_s:g} s), so Docker "
            "would kill env-server while it still closes sandboxes, and those keep running: set "
            f"ENV_SERVER_SHUTDOWN_GRACE_S below {stop_s:g} (default 75 with 90s), or raise ENV_SERVER_STOP_GRACE"
        )
    return None


def check_datasets(env, probes):
    """Every task of the dataset folders this container can see, by the check env-server starts with
    (stack/datasets.py), one line per bad task. Folders only env-server mounts are checked there."""
    try:
        from openenv.harbor.tasks import resolve_task_dirs
    except ImportError:  # an image without OpenEnv's discovery: env-server checks every task at its start
        return None
    read = Env(env.env, collect=True)
    specs = (*read.get(fields.DATASETS), *read.get(fields.EVAL_DATASETS))
    return task_check.preflight_problems(env.env, specs, resolve_task_dirs) or None


def check_weight_transfer(env, probes):
    import importlib.util

    if "WEIGHT_TRANSFER" in env.refusals:
        # Its one line is the refusal; the default's needs (nccl's vllm) would be a second, misleading one.
        return None
    transfer = WEIGHT_TRANSFERS.get(_get(env, "WEIGHT_TRANSFER"))
    try:
        spec = importlib.util.find_spec(transfer.requires)
    except ModuleNotFoundError:
        spec = None
    if spec is None:
        return f"WEIGHT_TRANSFER={transfer.name} needs {transfer.requires} in the trainer image: {transfer.missing}"
    return None


# Order is the order failures are printed in: the cheapest-to-fix first.
CHECKS: dict[str, Callable] = {
    "deployment": cluster.check_deployment,
    # The form's GPU count (two-GPU form, or one GPU with WEIGHT_TRANSFER=ipc) and the one-GPU fit: gpu_fit.py.
    "gpus": gpu_fit.check_gpus,
    "one-gpu-fit": gpu_fit.check_one_gpu_fit,
    "bucket-mount": check_bucket_mount,
    "bucket-writable": check_bucket_writable,
    "hf-home": check_hf_home,
    "checkpoints": check_checkpoints,
    "disk": check_disk,
    "trials-disk": check_trials_disk,
    "sandbox": check_sandbox,
    "ports": check_ports,
    "tunnel": check_tunnel,
    "train-script": check_train_script,
    "trainer-settings": check_trainer_settings,
    "stop-rules": check_stop_rules,
    "trainer-healthcheck": check_trainer_healthcheck,
    "env-server-settings": check_env_server_settings,
    "tunnel-settings": check_tunnel_settings,
    "report-to": check_report_to,
    "run-name": check_run_name,
    "resume": check_resume,
    "engine-parallel": check_engine_parallel,
    "stop-grace": check_stop_grace,
    "datasets": check_datasets,
    "weight-transfer": check_weight_transfer,
    "trainer-gpus": check_trainer_gpus,
    "hub-access": check_hub_access,
}
# Only preflight runs these. Once the stack is up the engine, env server and tunnel hold the ports;
# and the sandbox credentials (E2B key, docker socket) belong to the env server, which starts the
# sandboxes: the trainer never holds them, so it cannot and need not check them.
# "gpus" counts the host's GPUs: only preflight sees them all (compose reserves every GPU for it). The
# trainer container is given its own GPU(s) alone, so the host count there would refuse every real run
# ("found 1 GPU(s), need REQUIRED_GPUS=2"); its own view is checked by "trainer-gpus".
# env-server's and tunnel-check's settings reach preflight (compose.yaml), not the trainer; nor does the disk that
# holds the env server's trials folder.
PREFLIGHT_ONLY = {
    "ports",
    "sandbox",
    "gpus",
    "one-gpu-fit",
    "env-server-settings",
    "tunnel-settings",
    "trials-disk",
    "engine-parallel",
    "stop-grace",
}
# Preflight sees every GPU of the host (it counts them); only the trainer's own view matters here.
TRAINER_ONLY = {"trainer-gpus", "hub-access"}


def run_all(
    env: Mapping[str, str] | None = None, probes: Probes | None = None, phase: str = "preflight"
) -> list[Failure]:
    env = Settings(os.environ if env is None else env)
    probes = probes or Probes()
    failures, reported = [], set()
    for name, check in CHECKS.items():
        if phase != "preflight" and name in PREFLIGHT_ONLY or phase == "preflight" and name in TRAINER_ONLY:
            continue
        try:
            message = check(env, probes)
        except EnvError as exc:  # bad values, read through stack.env: each line already names the fix
            message = exc.problems
        except Exception as exc:  # a crashing check is itself a finding, and must not hide the others
            message = f"check crashed ({type(exc).__name__}: {exc}): report this; the other checks still ran"
        for line in [message] if isinstance(message, str) else message or []:
            # Several services read a shared setting (MODEL, DIRECT_URL, ...): its line is printed once, by the
            # first check that reads it.
            if line not in reported:
                reported.add(line)
                failures.append(Failure(name, line))
    return failures
