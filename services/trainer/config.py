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

from guards.checks import DEFAULT_STEP_LIMIT

CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")


def _get(env: Mapping[str, str], name: str, default: str) -> str:
    value = env.get(name)
    return default if value is None or not value.strip() else value.strip()


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


def _truthy(value: str) -> bool:
    return value.lower() not in ("0", "false", "no", "off", "")


@dataclass
class Settings:
    model: str
    engine_url: str  # the engine's root (weight sync, /health); rollouts get engine_url + /v1
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
    report_to: str
    weight_transfer: str
    bucket_dir: str
    run_name: str
    run_name_explicit: bool
    train_script: str
    dtype: str
    checkpoint_root_override: str = ""
    engine_max_model_len: int = 32768
    # Regional torch.compile of the decoder layers on GPU: 28-37% -> 34-37% MFU and 0.235 -> 0.184 GiB
    # per 1k packed tokens on an H200 (docs/GPU-BENCHMARK.md).
    compile_layers: bool = True
    # --- evaluation, screening, Hub publishing (trainer/evaluate.py, screen.py, publish.py) ---
    datasets: tuple[str, ...] = ()  # the splits trained on (DATASETS); empty means every split served
    evaluation: EvalSettings = field(default_factory=EvalSettings)
    hub: HubSettings = field(default_factory=HubSettings)
    screened_tasks: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def llm_url(self) -> str:
        return self.engine_url.rstrip("/") + "/v1"

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


def from_env(env: Mapping[str, str] | None = None) -> Settings:
    env = os.environ if env is None else env
    model = _get(env, "MODEL", "Qwen/Qwen3-1.7B")
    harness = _get(env, "HARNESS", "mini-swe-agent")
    max_steps = int(_get(env, "MAX_STEPS", "200"))
    step_limit = int(_get(env, "AGENT_STEP_LIMIT", str(DEFAULT_STEP_LIMIT)))
    if step_limit <= 0:
        # The guard reports this first; this is the backstop for a caller that skipped the guards.
        raise ValueError(f"AGENT_STEP_LIMIT={step_limit} would leave rollouts unbounded: set a positive limit")
    explicit = _get(env, "RUN_NAME", "")
    num_generations = int(_get(env, "NUM_GENERATIONS", "8"))
    return Settings(
        model=model,
        engine_url=_get(env, "ENGINE_URL", "http://127.0.0.1:8001").removesuffix("/v1").rstrip("/"),
        env_server_url=_get(env, "ENV_SERVER_URL", "http://127.0.0.1:8000"),
        harness=harness,
        sandbox=_get(env, "SANDBOX", "e2b"),
        agent_step_limit=step_limit,
        agent_timeout_s=float(_get(env, "AGENT_TIMEOUT_S", "900")),
        reward_key=_get(env, "REWARD_KEY", ""),
        tool_efficiency_bonus=float(_get(env, "TOOL_EFFICIENCY_BONUS", "0.1")),
        max_steps=max_steps,
        num_generations=num_generations,
        max_inflight_rollouts=int(_get(env, "MAX_INFLIGHT_ROLLOUTS", "8")),
        learning_rate=float(_get(env, "LEARNING_RATE", "1e-6")),
        temperature=float(_get(env, "TEMPERATURE", "1.0")),
        max_completion_tokens=int(_get(env, "MAX_COMPLETION_TOKENS", "4096")),
        # 0 switches TRL to fixed-count micro-batches of PER_DEVICE_TRAIN_BATCH_SIZE samples.
        token_budget=int(_get(env, "TOKEN_BUDGET", "32768")),
        per_device_train_batch_size=int(_get(env, "PER_DEVICE_TRAIN_BATCH_SIZE", str(num_generations))),
        gradient_accumulation_steps=int(_get(env, "GRADIENT_ACCUMULATION_STEPS", "1")),
        save_steps=int(_get(env, "SAVE_STEPS", "25")),
        report_to=_get(env, "REPORT_TO", "trackio"),
        weight_transfer=_get(env, "WEIGHT_TRANSFER", "nccl"),
        bucket_dir=_get(env, "BUCKET_DIR", "/bucket"),
        run_name=explicit or fresh_run_name(model, harness, max_steps),
        run_name_explicit=bool(explicit),
        train_script=_get(env, "TRAIN_SCRIPT", ""),
        checkpoint_root_override=_get(env, "CHECKPOINT_ROOT", ""),
        engine_max_model_len=int(_get(env, "ENGINE_MAX_MODEL_LEN", "32768")),
        compile_layers=_get(env, "TRAINER_COMPILE_LAYERS", "1") not in ("0", "false", "no"),
        datasets=_splits(_get(env, "DATASETS", "")),
        evaluation=eval_from_env(env),
        hub=hub_from_env(env),
        screened_tasks=_get(env, "SCREENED_TASKS", ""),
        # bf16 on GPU (what vLLM serves); the CPU form trains and serves float32.
        dtype=_get(env, "TRAIN_DTYPE", "bfloat16" if _get(env, "WEIGHT_TRANSFER", "nccl") == "nccl" else "float32"),
    )


def eval_from_env(env: Mapping[str, str]) -> EvalSettings:
    pass_k = tuple(sorted({int(k) for k in _splits(_get(env, "EVAL_PASS_K", "1"))} | {1}))
    attempts = int(_get(env, "EVAL_ATTEMPTS", str(max(pass_k))))
    if attempts < max(pass_k):
        raise ValueError(
            f"EVAL_PASS_K={','.join(map(str, pass_k))} needs EVAL_ATTEMPTS >= {max(pass_k)} attempts per task "
            f"(EVAL_ATTEMPTS={attempts}): raise EVAL_ATTEMPTS or lower EVAL_PASS_K"
        )
    bucket = _get(env, "BUCKET_DIR", "/bucket")
    return EvalSettings(
        steps=int(_get(env, "EVAL_STEPS", "0")),
        datasets=_splits(_get(env, "EVAL_DATASETS", "")),
        attempts=attempts,
        pass_k=pass_k,
        temperature=float(_get(env, "EVAL_TEMPERATURE", "0.6")),
        top_p=float(_get(env, "EVAL_TOP_P", "0.95")),
        max_tasks=int(_get(env, "EVAL_MAX_TASKS", "0")),
        concurrency=max(1, int(_get(env, "EVAL_CONCURRENCY", "4"))),
        baseline=_get(env, "EVAL_BASELINE", str(Path(bucket) / "evals" / "baseline" / "eval.json")),
    )


def hub_from_env(env: Mapping[str, str]) -> HubSettings:
    return HubSettings(
        model_id=_get(env, "HUB_MODEL_ID", ""),
        token=_get(env, "HUB_TOKEN", ""),
        push_checkpoints=_truthy(_get(env, "HUB_PUSH_CHECKPOINTS", "0")),
        private=_truthy(_get(env, "HUB_PRIVATE", "1")),
        endpoint=_get(env, "HF_ENDPOINT", ""),
        attempts=max(1, int(_get(env, "HUB_PUSH_ATTEMPTS", "5"))),
        retry_s=float(_get(env, "HUB_RETRY_S", "30")),
        final_wait_s=float(_get(env, "HUB_FINAL_WAIT_S", "1800")),
    )
