"""The GPU check's knobs and folders, read from the environment (stdlib only: unit-tested on the CPU host).

    GPU_CHECK_STEPS                optimizer steps (default 3)
    GPU_CHECK_ROLLOUTS_PER_STEP    rollouts per optimizer step: TRL's fixed-count micro-batch (TOKEN_BUDGET=0,
                                   PER_DEVICE_TRAIN_BATCH_SIZE=N). Unset: the production path, token-budget packing
                                   at GPU_CHECK_TOKEN_BUDGET (default 4096 tokens: 14-15 rollouts a step measured)
    GPU_CHECK_CONCURRENT_ROLLOUTS  rollouts in flight at once (MAX_INFLIGHT_ROLLOUTS, default 8)
    GPU_CHECK_RESUME               a run name printed by an earlier run: train on in its folder from its last
                                   checkpoint (GPU_CHECK_STEPS is then the step to reach). Unset: a fresh run
    GPU_CHECK_WORK                 where the runs and the built model live (default /tmp/gpu-check)
    GPU_CHECK_TRAIN_TIMEOUT_S      the trainer's limit (default 420)
    GPU_CHECK_ENGINE_TIMEOUT_S     the engine's limit, launcher to probe-healthy (default 420)
    GPU_CHECK_TOTAL_TIMEOUT_S      the whole check's limit: every wait gets at most what is left of it (default 540:
                                   the device call's 600 s less the unpacking that runs before the check)
    GPU_CHECK_FORM                 auto (default): the one-GPU form on a machine with one GPU, the two-GPU form on
                                   one with two or more; one / two force it (check_form.py)

Every run gets a fresh folder and run name: the trainer resumes any run whose name it finds checkpoints for,
so a second run on a held machine under a fixed name trained on from the first run's checkpoint (seen: the
name was `gpu-check` and the folder /tmp/gpu-check for every run). The model is built once per version of
tests/gpu/build_model.py (its folder is named after the script's hash) and shared between runs.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import check_form

from stack.env import Env, EnvError
from stack.readers.trainer import latest_checkpoint

RUN_PREFIX = "gpu-check"


@dataclass(frozen=True)
class Knobs:
    steps: int
    rollouts_per_step: int | None  # None: token-budget packing (the production path)
    token_budget: int
    concurrent_rollouts: int
    resume: str
    work_root: Path
    train_timeout_s: int
    engine_timeout_s: int
    total_timeout_s: int = 540
    form: str = "auto"  # check_form.CHOICES


def read(env: Mapping[str, str]) -> Knobs:
    """The knobs, or EnvError with one line per bad value (each names the variable, its value and the fix)."""
    r = Env(env, collect=True)
    rollouts = r.integer("GPU_CHECK_ROLLOUTS_PER_STEP", 0, minimum=1)
    knobs = Knobs(
        steps=r.integer("GPU_CHECK_STEPS", 3, minimum=1),
        rollouts_per_step=rollouts or None,
        token_budget=r.integer(
            "GPU_CHECK_TOKEN_BUDGET",
            4096,
            minimum=1,
            fix="set a positive number of tokens per packed row (for a fixed count set GPU_CHECK_ROLLOUTS_PER_STEP)",
        ),
        concurrent_rollouts=r.integer("GPU_CHECK_CONCURRENT_ROLLOUTS", 8, minimum=1),
        resume=r.text("GPU_CHECK_RESUME"),
        work_root=Path(r.text("GPU_CHECK_WORK", "/tmp/gpu-check")),
        train_timeout_s=r.integer("GPU_CHECK_TRAIN_TIMEOUT_S", 420, minimum=1),
        engine_timeout_s=r.integer("GPU_CHECK_ENGINE_TIMEOUT_S", 420, minimum=1),
        total_timeout_s=r.integer("GPU_CHECK_TOTAL_TIMEOUT_S", 540, minimum=1),
        form=r.choice(
            check_form.KNOB,
            "auto",
            check_form.CHOICES,
            fix=f"set {check_form.KNOB} to auto (by the GPUs seen), one (engine and trainer on GPU 0, ipc) or two "
            "(engine on GPU 0, trainer on GPU 1, nccl)",
        ),
    )
    r.check()
    return knobs


def trainer_env(knobs: Knobs, run: str) -> dict[str, str]:
    """The trainer settings the knobs decide."""
    env = {
        "RUN_NAME": run,
        "MAX_STEPS": str(knobs.steps),
        "MAX_INFLIGHT_ROLLOUTS": str(knobs.concurrent_rollouts),
        "TOKEN_BUDGET": str(knobs.token_budget),
    }
    if knobs.rollouts_per_step:
        # TRL's FixedCountBatcher: per_device_train_batch_size x processes (1) samples per micro-batch, one
        # micro-batch per step (GRADIENT_ACCUMULATION_STEPS 1); the check asserts one sample per rollout.
        env |= {"TOKEN_BUDGET": "0", "PER_DEVICE_TRAIN_BATCH_SIZE": str(knobs.rollouts_per_step)}
    return env


@dataclass(frozen=True)
class Layout:
    run: str
    run_dir: Path  # WORK/runs/RUN: this run's bucket and logs
    bucket: Path
    out: Path  # figures and the three processes' logs
    model: Path  # WORK/models/<hash of build_model.py>
    start_step: int  # the checkpoint a resumed run starts from; 0 for a fresh run


def model_dir(work_root: Path, build_script: Path) -> Path:
    return work_root / "models" / hashlib.sha256(build_script.read_bytes()).hexdigest()[:12]


def plan(knobs: Knobs, build_script: Path, out: str = "", now: float | None = None) -> Layout:
    """This run's folders: a fresh run name and folder, or the resumed run's (EnvError if there is none)."""
    runs = knobs.work_root / "runs"
    if knobs.resume:
        run = knobs.resume
        run_dir = runs / run
        if not run_dir.is_dir():
            known = sorted(p.name for p in runs.glob(f"{RUN_PREFIX}-*")) if runs.is_dir() else []
            raise EnvError(
                f"GPU_CHECK_RESUME={run!r} names no run under {runs}: set it to one of "
                f"{', '.join(known) or '(none: no run has been made here)'}, or leave it unset for a fresh run"
            )
    else:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
        run = f"{RUN_PREFIX}-{stamp}-{secrets.token_hex(3)}"
        run_dir = runs / run
    bucket = run_dir / "bucket"
    last = latest_checkpoint(bucket / "checkpoints" / run) if knobs.resume else None
    start_step = int(last.name.split("-")[1]) if last else 0
    if start_step >= knobs.steps:
        raise EnvError(
            f"GPU_CHECK_RESUME={run!r} has reached step {start_step} already and GPU_CHECK_STEPS={knobs.steps}: "
            f"set GPU_CHECK_STEPS above {start_step} to train on"
        )
    run_dir.mkdir(parents=True, exist_ok=bool(knobs.resume))
    bucket.mkdir(exist_ok=True)
    out_dir = Path(out) if out else run_dir / "out"
    out_dir.mkdir(parents=True, exist_ok=True)
    return Layout(
        run=run,
        run_dir=run_dir,
        bucket=bucket,
        out=out_dir,
        model=model_dir(knobs.work_root, build_script),
        start_step=start_step,
    )
