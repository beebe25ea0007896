"""The trainer's settings, read once from the environment, with every default stated here.

Run names never fall back to a constant: two runs sharing a name would resume into each other's
checkpoints. A fresh name carries model, harness, steps, a UTC stamp and a random suffix; an explicit
RUN_NAME means "this run", and resumes from its latest checkpoint.
"""

from __future__ import annotations

import os
import re
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from stack.endpoints import openai_base, read_engine_url
from stack.env import Env, EnvError
from stack.facts import (
    BUCKET_DIR,
    DEFAULT_SANDBOX,
    DEFAULT_STEP_LIMIT,
    DEFAULT_WEIGHT_TRANSFER,
    SANDBOXES,
    WEIGHT_TRANSFERS,
)

from . import precision, reporting

CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")


def fresh_run_name(model: str, harness: str, max_steps: int, now: float | None = None) -> str:
    model_slug = re.sub(r"[^A-Za-z0-9.]+", "-", model.rstrip("/").split("/")[-1]).strip("-").lower() or "model"
    harness_slug = re.sub(r"[^A-Za-z0-9.]+", "-", harness.split(":")[-1]).strip("-").lower() or "harness"
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    return f"{model_slug}-{harness_slug}-{max_steps}steps-{stamp}-{secrets.token_hex(3)}"


def latest_checkpoint(run_dir: str | os.PathLike) -> Path | None:
    """The highest `checkpoint-N` that was completely written (trainer_state.json is saved last)."""
    best, best_step = None, -1
    for child in Path(run_dir).glob("checkpoint-*"):
        match = CHECKPOINT_RE.match(child.name)
        if match and (child / "trainer_state.json").is_file() and int(match.group(1)) > best_step:
            best, best_step = child, int(match.group(1))
    return best


def _splits(value: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in value.split(",") if part.strip())


@dataclass(frozen=True)
class EvalSettings:
    """EVAL_*: the held-out evaluation, periodic (EVAL_STEPS) and standalone (`python -m trainer.evaluate`)."""

    steps: int = 0  # 0: no periodic evaluation during training
    datasets: tuple[str, ...] = ()  # split names as the env server lists them (its DATASETS + EVAL_DATASETS)
    attempts: int = 1  # scored attempts per task; pass@k needs k of them
    pass_k: tuple[int, ...] = (1,)
    temperature: float = 0.6
    top_p: float = 0.95
    max_tasks: int = 0  # 0: every task of the eval splits
    concurrency: int = 4
    baseline: str = ""  # eval.json of the base model; default <bucket>/evals/baseline/eval.json

    @property
    def sampling(self) -> dict:
        """OpenEnv's eval sampling (`run_rollout(purpose="eval", eval_sampling=...)`)."""
        return {"temperature": self.temperature, "top_p": self.top_p}


@dataclass(frozen=True)
class HubSettings:
    """HUB_*: push the final model (and optionally each retained checkpoint) with huggingface_hub."""

    model_id: str = ""  # empty: nothing is pushed
    token: str = field(default="", repr=False)  # never printed; HUB_TOKEN, else huggingface_hub's own lookup
    push_checkpoints: bool = False
    private: bool = True
    endpoint: str = ""  # HF_ENDPOINT: the Hub's address (a test points it at a local stand-in)
    attempts: int = 5
    retry_s: float = 30.0  # first retry delay; doubles per attempt
    final_wait_s: float = 1800.0  # how long the trainer waits at exit for the final push


@dataclass
class Settings:
    model: str
    engine_url: str  # the engine's root (weight sync, /health); rollouts get its OpenAI base (llm_url)
    env_server_url: str
    harness: str
    sandbox: str
    agent_step_limit: int
    agent_timeout_s: float
    reward_key: str
    tool_efficiency_bonus: float
    max_steps: int
    num_generations: int
    max_inflight_rollouts: int
    learning_rate: float
    temperature: float
    max_completion_tokens: int
    token_budget: int
    per_device_train_batch_size: int
    gradient_accumulation_steps: int
    save_steps: int
    save_total_limit: int
    report_to: str
    weight_transfer: str
    bucket_dir: str
    run_name: str
    run_name_explicit: bool
    train_script: str
    dtype: str
    checkpoint_root_override: str = ""
    # TRL's max_staleness; None: derived from the batch shape (trainer/staleness.py)
    max_staleness: int | None = None
    engine_max_model_len: int = 32768
    # Regional torch.compile of the decoder layers on GPU: 28-37% -> 34-37% MFU and 0.235 -> 0.184 GiB
    # per 1k packed tokens on an H200 (docs/GPU-BENCHMARK.md).
    compile_layers: bool = True
    # --- evaluation, screening, Hub publishing (trainer/evaluate.py, screen.py, publish.py) ---
    datasets: tuple[str, ...] = ()  # the splits trained on (DATASETS); empty means every split served
    evaluation: EvalSettings = field(default_factory=EvalSettings)
    hub: HubSettings = field(default_factory=HubSettings)
    screened_tasks: str = ""

    @property
    def llm_url(self) -> str:
        return openai_base(self.engine_url)

    @property
    def checkpoint_root(self) -> Path:
        # Preflight refuses a CHECKPOINT_ROOT off the bucket.
        return Path(self.checkpoint_root_override or Path(self.bucket_dir) / "checkpoints")

    @property
    def run_dir(self) -> Path:
        return self.checkpoint_root / self.run_name

    @property
    def status_path(self) -> Path:
        return self.run_dir / "status.json"

    @property
    def dashboard_dir(self) -> Path:
        return Path(self.bucket_dir) / "dashboards"

    def resume_from(self) -> Path | None:
        return latest_checkpoint(self.run_dir) if self.run_name_explicit else None


# One list of backends: reporting.py prepares each (wandb was missing here, so every wandb run was refused).
REPORT_TO = reporting.CHOICES
DTYPES = ("bfloat16", "float16", "float32")
DEFAULT_SAVE_TOTAL_LIMIT = 2


class SettingsError(EnvError):
    """Settings the trainer cannot run with; `problems` holds one line per bad value."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


def read(env: Mapping[str, str] | None = None) -> tuple[Settings, list[str]]:
    """The trainer's settings and every problem with them, one line each. The ONE definition: the
    trainer starts from it, and preflight (guards `trainer-settings`) reports its problems before any
    GPU time is spent (measured on main before this: MAX_STEPS=2e2 passed preflight and ended as a bare
    traceback in the trainer after the engine had loaded). A bad value reads as its default, so the
    reads that depend on it still run."""
    r = Env(env, collect=True)
    model = r.text("MODEL", "Qwen/Qwen3-1.7B")
    harness = r.text("HARNESS", "mini-swe-agent")
    max_steps = r.integer("MAX_STEPS", 200, minimum=1)
    step_limit = r.integer(
        "AGENT_STEP_LIMIT",
        DEFAULT_STEP_LIMIT,
        minimum=1,
        fix="set a positive number of model calls; 0 or less would leave rollouts unbounded (a chained "
        "rollout's packed length, and the trainer's memory, grows with every turn: 58-turn rollouts ran an "
        "80 GiB card out of memory)",
    )
    explicit = r.text("RUN_NAME")
    num_generations = r.integer(
        "NUM_GENERATIONS",
        8,
        minimum=2,
        fix="set it to at least 2 (GRPO scores each rollout against the others of its group: one has no baseline)",
    )
    weight_transfer = r.choice("WEIGHT_TRANSFER", DEFAULT_WEIGHT_TRANSFER, WEIGHT_TRANSFERS)
    bucket_dir = r.path("BUCKET_DIR", BUCKET_DIR)
    settings = Settings(
        model=model,
        engine_url=read_engine_url(r),
        env_server_url=r.url("ENV_SERVER_URL", "http://127.0.0.1:8000"),
        harness=harness,
        sandbox=r.choice("SANDBOX", DEFAULT_SANDBOX, SANDBOXES),
        agent_step_limit=step_limit,
        agent_timeout_s=r.number("AGENT_TIMEOUT_S", 900.0, above=0),
        reward_key=r.text("REWARD_KEY"),
        tool_efficiency_bonus=r.number("TOOL_EFFICIENCY_BONUS", 0.1, minimum=0),
        max_steps=max_steps,
        num_generations=num_generations,
        max_inflight_rollouts=r.integer("MAX_INFLIGHT_ROLLOUTS", 8, minimum=1),
        learning_rate=r.number("LEARNING_RATE", 1e-6, above=0),
        temperature=r.number(
            "TEMPERATURE",
            1.0,
            above=0,
            fix="set it above 0 (the policy's logprobs are processed at it; 0 is greedy, not a policy)",
        ),
        max_completion_tokens=r.integer("MAX_COMPLETION_TOKENS", 4096, minimum=1),
        # 0 switches TRL to fixed-count micro-batches of PER_DEVICE_TRAIN_BATCH_SIZE samples.
        token_budget=r.integer("TOKEN_BUDGET", 32768, minimum=0),
        per_device_train_batch_size=r.integer("PER_DEVICE_TRAIN_BATCH_SIZE", num_generations, minimum=1),
        max_staleness=None
        if r.text("MAX_STALENESS", "auto").strip().lower() == "auto"
        else r.integer(
            "MAX_STALENESS",
            0,
            minimum=0,
            fix="set a whole number of optimizer steps >= 0, or auto (4 x the steps one group spans)",
        ),
        gradient_accumulation_steps=r.integer("GRADIENT_ACCUMULATION_STEPS", 1, minimum=1),
        save_steps=r.integer("SAVE_STEPS", 25, minimum=1, fix="set it to at least 1 (0 would never save a checkpoint)"),
        save_total_limit=r.integer("SAVE_TOTAL_LIMIT", DEFAULT_SAVE_TOTAL_LIMIT, minimum=1),
        report_to=r.choice("REPORT_TO", "trackio", REPORT_TO),
        weight_transfer=weight_transfer,
        bucket_dir=bucket_dir,
        run_name=explicit or fresh_run_name(model, harness, max_steps),
        run_name_explicit=bool(explicit),
        train_script=r.text("TRAIN_SCRIPT"),
        checkpoint_root_override=r.path("CHECKPOINT_ROOT"),
        engine_max_model_len=r.integer("ENGINE_MAX_MODEL_LEN", 32768, minimum=1),
        compile_layers=r.flag("TRAINER_COMPILE_LAYERS", True),
        datasets=_splits(r.text("DATASETS")),
        evaluation=eval_from_env(r, bucket_dir),
        hub=hub_from_env(r),
        screened_tasks=r.text("SCREENED_TASKS"),
        # The weights' and AdamW state's dtype: float32 in both forms, bfloat16 compute on the GPU
        # (trainer/precision.py says why: bfloat16 weights do not move at LEARNING_RATE=1e-6).
        dtype=r.choice("TRAIN_DTYPE", precision.default_weights_dtype(weight_transfer), DTYPES),
    )
    return settings, r.problems


def from_env(env: Mapping[str, str] | None = None) -> Settings:
    """The settings, or SettingsError listing every problem (preflight reported them first)."""
    settings, problems = read(env)
    if problems:
        raise SettingsError(problems)
    return settings


def eval_from_env(r: Env, bucket_dir: str) -> EvalSettings:
    raw_k = r.text("EVAL_PASS_K", "1")
    try:
        ks = {int(k) for k in _splits(raw_k)}
        if any(k < 1 for k in ks):
            raise ValueError(raw_k)
    except ValueError:
        ks = r.refuse(
            f"EVAL_PASS_K={raw_k!r} is not a list of positive whole numbers: set it like 1,4,8 (default 1)", {1}
        )
    pass_k = tuple(sorted(ks | {1}))
    attempts = r.integer("EVAL_ATTEMPTS", max(pass_k), minimum=1)
    if attempts < max(pass_k):
        r.refuse(
            f"EVAL_PASS_K={','.join(map(str, pass_k))} needs EVAL_ATTEMPTS >= {max(pass_k)} attempts per task "
            f"(EVAL_ATTEMPTS={attempts}): raise EVAL_ATTEMPTS or lower EVAL_PASS_K",
            None,
        )
    return EvalSettings(
        steps=r.integer("EVAL_STEPS", 0, minimum=0),
        datasets=_splits(r.text("EVAL_DATASETS")),
        attempts=attempts,
        pass_k=pass_k,
        temperature=r.number("EVAL_TEMPERATURE", 0.6, minimum=0),
        top_p=r.number("EVAL_TOP_P", 0.95, minimum=0, maximum=1),
        max_tasks=r.integer("EVAL_MAX_TASKS", 0, minimum=0),
        concurrency=r.integer("EVAL_CONCURRENCY", 4, minimum=1),
        baseline=r.text("EVAL_BASELINE", str(Path(bucket_dir) / "evals" / "baseline" / "eval.json")),
    )


def hub_from_env(r: Env) -> HubSettings:
    return HubSettings(
        model_id=r.text("HUB_MODEL_ID"),
        token=r.text("HUB_TOKEN"),
        push_checkpoints=r.flag("HUB_PUSH_CHECKPOINTS", False),
        private=r.flag("HUB_PRIVATE", True),
        endpoint=r.text("HF_ENDPOINT"),
        attempts=r.integer("HUB_PUSH_ATTEMPTS", 5, minimum=1),
        retry_s=r.number("HUB_RETRY_S", 30.0, minimum=0),
        final_wait_s=r.number("HUB_FINAL_WAIT_S", 1800.0, minimum=0),
    )
