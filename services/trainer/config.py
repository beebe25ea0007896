"""The trainer's settings, read once from the environment, with every default stated here.

Run names never fall back to a constant: two runs sharing a name would resume into each other's
checkpoints. A fresh name carries model, harness, steps, a UTC stamp and a random suffix; an explicit
RUN_NAME means "this run", and resumes from its latest checkpoint.
"""

from __future__ import annotations

import math
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
    save_total_limit: int
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


REPORT_TO = ("trackio", "tensorboard", "none")
WEIGHT_TRANSFERS = ("nccl", "mock")
DTYPES = ("bfloat16", "float16", "float32")
SANDBOXES = ("e2b", "docker")
DEFAULT_SAVE_TOTAL_LIMIT = 2


class SettingsError(ValueError):
    """Settings the trainer cannot run with; `problems` holds one line per bad value."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


class _Reader:
    """Reads each value once and keeps going after a bad one, so preflight lists every problem at once.
    A bad value reads as its default (so later reads that depend on it still run).

    Shaped like issue 12's `stack.env.Env(collect=True)`; it moves there once that package is on main.
    """

    def __init__(self, env: Mapping[str, str]):
        self.env = env
        self.problems: list[str] = []

    def text(self, name: str, default: str = "") -> str:
        return _get(self.env, name, default)

    def _bad(self, line: str, default):
        self.problems.append(line)
        return default

    def integer(self, name: str, default: int, minimum: int, why: str = "") -> int:
        raw = _get(self.env, name, "")
        if not raw:
            return default
        try:
            value = int(raw)
        except ValueError:
            return self._bad(f"{name}={raw!r} is not a whole number: write it in digits (default {default})", default)
        if value < minimum:
            return self._bad(
                f"{name}={value} is below {minimum}{why}: set it to at least {minimum} (default {default})", default
            )
        return value

    def number(
        self, name: str, default: float, *, above: float | None = None, minimum: float | None = None, why: str = ""
    ) -> float:
        raw = _get(self.env, name, "")
        if not raw:
            return default
        try:
            value = float(raw)
        except ValueError:
            return self._bad(
                f"{name}={raw!r} is not a number: write it like {default:g} (default {default:g})", default
            )
        if not math.isfinite(value):
            return self._bad(f"{name}={raw!r} is not a finite number (default {default:g})", default)
        if above is not None and value <= above:
            return self._bad(f"{name}={raw} must be above {above:g}{why} (default {default:g})", default)
        if minimum is not None and value < minimum:
            return self._bad(f"{name}={raw} is below {minimum:g}{why} (default {default:g})", default)
        return value

    def choice(self, name: str, default: str, choices: tuple[str, ...]) -> str:
        raw = _get(self.env, name, "")
        if not raw:
            return default
        if raw.lower() in choices:
            return raw.lower()
        return self._bad(f"{name}={raw!r} is not one of {', '.join(choices)} (default {default})", default)

    def flag(self, name: str, default: bool) -> bool:
        raw = _get(self.env, name, "").lower()
        if not raw:
            return default
        if raw in ("1", "true", "yes", "on", "0", "false", "no", "off"):
            return raw in ("1", "true", "yes", "on")
        return self._bad(f"{name}={raw!r} is not a yes/no value: set it to 1 or 0 (default {int(default)})", default)

    def section(self, what: str, read_section, default):
        """A group of settings read by its own function (issue 18's EVAL_*/HUB_*): a bad value there is one
        line here too, instead of the int()/float() traceback it would be."""
        try:
            return read_section(self.env)
        except ValueError as exc:
            return self._bad(f"{what}: {exc}", default)

    def url(self, name: str, default: str) -> str:
        raw = _get(self.env, name, default)
        scheme, sep, rest = raw.partition("://")
        if not sep or scheme not in ("http", "https") or not rest.strip("/"):
            return self._bad(f"{name}={raw!r} is not an http(s) URL: e.g. {default}", default)
        return raw.rstrip("/")


def read(env: Mapping[str, str] | None = None) -> tuple[Settings, list[str]]:
    """The trainer's settings and every problem with them, one line each. The ONE definition: the
    trainer starts from it, and preflight (guards `trainer-settings`) reports its problems before any
    GPU time is spent (measured on main before this: MAX_STEPS=2e2 passed preflight and ended as a bare
    traceback in the trainer after the engine had loaded)."""
    env = os.environ if env is None else env
    r = _Reader(env)
    model = r.text("MODEL", "Qwen/Qwen3-1.7B")
    harness = r.text("HARNESS", "mini-swe-agent")
    max_steps = r.integer("MAX_STEPS", 200, 1)
    step_limit = r.integer(
        "AGENT_STEP_LIMIT",
        DEFAULT_STEP_LIMIT,
        1,
        " (0 would leave rollouts unbounded: packed length grows with the square of the turns; 58-turn "
        "rollouts ran an 80 GiB card out of memory)",
    )
    explicit = r.text("RUN_NAME", "")
    num_generations = r.integer(
        "NUM_GENERATIONS", 8, 2, " (GRPO scores each rollout against the others of its group: one has no baseline)"
    )
    weight_transfer = r.choice("WEIGHT_TRANSFER", "nccl", WEIGHT_TRANSFERS)
    settings = Settings(
        model=model,
        engine_url=r.url("ENGINE_URL", "http://127.0.0.1:8001").removesuffix("/v1").rstrip("/"),
        env_server_url=r.url("ENV_SERVER_URL", "http://127.0.0.1:8000"),
        harness=harness,
        sandbox=r.choice("SANDBOX", "e2b", SANDBOXES),
        agent_step_limit=step_limit,
        agent_timeout_s=r.number("AGENT_TIMEOUT_S", 900.0, above=0),
        reward_key=r.text("REWARD_KEY", ""),
        tool_efficiency_bonus=r.number("TOOL_EFFICIENCY_BONUS", 0.1, minimum=0),
        max_steps=max_steps,
        num_generations=num_generations,
        max_inflight_rollouts=r.integer("MAX_INFLIGHT_ROLLOUTS", 8, 1),
        learning_rate=r.number("LEARNING_RATE", 1e-6, above=0),
        temperature=r.number(
            "TEMPERATURE", 1.0, above=0, why=" (the policy's logprobs are processed at it; 0 is greedy, not a policy)"
        ),
        max_completion_tokens=r.integer("MAX_COMPLETION_TOKENS", 4096, 1),
        # 0 switches TRL to fixed-count micro-batches of PER_DEVICE_TRAIN_BATCH_SIZE samples.
        token_budget=r.integer("TOKEN_BUDGET", 32768, 0),
        per_device_train_batch_size=r.integer("PER_DEVICE_TRAIN_BATCH_SIZE", num_generations, 1),
        gradient_accumulation_steps=r.integer("GRADIENT_ACCUMULATION_STEPS", 1, 1),
        save_steps=r.integer("SAVE_STEPS", 25, 1, " (0 would never save a checkpoint)"),
        save_total_limit=r.integer("SAVE_TOTAL_LIMIT", DEFAULT_SAVE_TOTAL_LIMIT, 1),
        report_to=r.choice("REPORT_TO", "trackio", REPORT_TO),
        weight_transfer=weight_transfer,
        bucket_dir=r.text("BUCKET_DIR", "/bucket"),
        run_name=explicit or fresh_run_name(model, harness, max_steps),
        run_name_explicit=bool(explicit),
        train_script=r.text("TRAIN_SCRIPT", ""),
        checkpoint_root_override=r.text("CHECKPOINT_ROOT", ""),
        engine_max_model_len=r.integer("ENGINE_MAX_MODEL_LEN", 32768, 1),
        compile_layers=r.flag("TRAINER_COMPILE_LAYERS", True),
        datasets=_splits(r.text("DATASETS", "")),
        evaluation=r.section("EVAL_*", eval_from_env, EvalSettings()),
        hub=r.section("HUB_*", hub_from_env, HubSettings()),
        screened_tasks=r.text("SCREENED_TASKS", ""),
        # bf16 on GPU (what vLLM serves); the CPU form trains and serves float32.
        dtype=r.choice("TRAIN_DTYPE", "bfloat16" if weight_transfer == "nccl" else "float32", DTYPES),
    )
    return settings, r.problems


def from_env(env: Mapping[str, str] | None = None) -> Settings:
    """The settings, or SettingsError listing every problem (preflight reported them first)."""
    settings, problems = read(env)
    if problems:
        raise SettingsError(problems)
    return settings


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
