"""The trainer's settings, read once from the environment, with every default stated here. Preflight (guards)
reads them with this same reader, before the trainer starts.

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
from dataclasses import dataclass, field, make_dataclass
from pathlib import Path

from stack import fields, names
from stack.endpoints import openai_base, read_engine_url
from stack.env import _UNSET, Env, EnvError, Field, Table


def fresh_run_name(model: str, harness: str, max_steps: int, now: float | None = None) -> str:
    model_slug = re.sub(r"[^A-Za-z0-9.]+", "-", model.rstrip("/").split("/")[-1]).strip("-").lower() or "model"
    harness_slug = re.sub(r"[^A-Za-z0-9.]+", "-", harness.split(":")[-1]).strip("-").lower() or "harness"
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    return f"{model_slug}-{harness_slug}-{max_steps}steps-{stamp}-{secrets.token_hex(3)}"


def latest_checkpoint(run_dir: str | os.PathLike) -> Path | None:
    """The newest `checkpoint-N` that is complete and loads (stack/resume.py; EnvError when none does)."""
    from stack.resume import pick

    return pick(run_dir).path


def _splits(value: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in value.split(",") if part.strip())


@dataclass(frozen=True)
class EvalSettings:
    """EVAL_*: the held-out evaluation, periodic (EVAL_STEPS) and standalone (`python -m trainer.evaluation.evaluate`)."""

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


DTYPES = ("bfloat16", "float16", "float32")
MAX_STEPS_BOUND = 1_000_000
# Sampling temperature: above a few every token is noise (OpenAI's API stops at 2); 10 leaves room for experiments.
MAX_TEMPERATURE = 10.0
# Scored attempts per eval task, and so the largest k of pass@k: pass@1000 is past any published evaluation.
MAX_EVAL_ATTEMPTS = 1000

F = fields
FIELDS = Table(
    F.MODEL,
    Field("HARNESS", "text", "mini-swe-agent", "agent harness run inside the sandbox"),
    # At the fastest step measured (8.7 s on an H200 with short rollouts, docs/GPU-STACK.md) a million steps is
    # three months of one run: a count above it can only be a typo.
    Field("MAX_STEPS", "integer", 200, "optimizer steps to train", minimum=1, maximum=MAX_STEPS_BOUND),
    F.RUN_NAME,
    F.BUCKET_DIR,
    F.CHECKPOINT_ROOT,
    Field(
        "NUM_GENERATIONS",
        "integer",
        8,
        "rollouts per task (GRPO group size)",
        fix="set it to at least 2 (GRPO scores each rollout against the others of its group: one has no baseline)",
        minimum=2,
        maximum=1024,
        fix_above="set it to at most 1024 (each rollout of a group is a paid sandbox; groups of 8-64 are usual)",
    ),
    F.WEIGHT_TRANSFER,
    F.ENGINE_URL,
    F.ENV_SERVER_URL,
    F.SANDBOX,
    F.AGENT_STEP_LIMIT,
    # A day: E2B's longest sandbox lifetime (24 h, Pro); a rollout past it has lost its sandbox anyway.
    Field("AGENT_TIMEOUT_S", "number", 900.0, "seconds the agent may run in its sandbox", above=0, maximum=86_400),
    Field("REWARD_KEY", "text", "", "which verifier reward is the training signal; empty: the task's main one"),
    # A bonus at or above a 0/1 verifier's whole scale would rank solutions by tool calls as much as by solving.
    Field(
        "TOOL_EFFICIENCY_BONUS",
        "number",
        0.1,
        "extra reward for fewer tool calls when correct",
        minimum=0,
        maximum=1,
        fix_above="set it to at most 1, e.g. 0.1 (a bonus on the verifier's 0-1 reward orders solutions; at 1 it "
        "outweighs solving)",
    ),
    F.MAX_INFLIGHT_ROLLOUTS,
    # RL fine-tuning of a pretrained model runs at 1e-7..1e-5; AdamW's first step moves every weight by
    # about the learning rate, so at 1e-2 and above the model is destroyed in a step or two (a typo such as
    # 1e6 for 1e-6, or 1e9, trained on in silence before this bound).
    Field(
        "LEARNING_RATE",
        "number",
        1e-6,
        "optimizer learning rate, in (0, 0.01]",
        fix="set it in (0, 0.01], e.g. 1e-6 (RL fine-tuning runs at 1e-7..1e-5; AdamW moves every weight by "
        "about this much per step, so 0.01 and up wrecks a pretrained model)",
        above=0,
        maximum=1e-2,
    ),
    # TRL 1.16.0 (async_grpo_config.py) keeps the learning rate constant by default, because a decay horizon in
    # optimizer steps is unknown when the run is bounded by epochs; this stack always sets MAX_STEPS, so a decay
    # reaches zero at the last step. Why the learning gate decays it: compose.learn.yaml, docs/LEARNING.md.
    Field(
        "LR_SCHEDULER",
        "choice",
        "constant",
        "learning-rate schedule over MAX_STEPS (TRL's lr_scheduler_type)",
        choices=("constant", "linear", "cosine"),
    ),
    Field(
        "TEMPERATURE",
        "number",
        1.0,
        "sampling temperature of the training policy",
        fix="set it above 0 (the policy's logprobs are processed at it; 0 is greedy, not a policy)",
        above=0,
        maximum=MAX_TEMPERATURE,
        fix_above="set it to at most 10, e.g. 1.0 (above a few every sampled token is noise)",
    ),
    F.MAX_OUTPUT_TOKENS,
    # 0 switches TRL to fixed-count micro-batches of PER_DEVICE_TRAIN_BATCH_SIZE samples.
    Field(
        "TOKEN_BUDGET",
        "integer",
        32768,
        "packed tokens per micro-batch; 0: fixed-count micro-batches",
        minimum=0,
        # The longest context the engine may serve (ENGINE_MAX_MODEL_LEN's bound); 64k ran an H200 out of memory.
        maximum=fields.MAX_CONTEXT_TOKENS,
    ),
    Field(
        "PER_DEVICE_TRAIN_BATCH_SIZE",
        "integer",
        None,
        "samples per micro-batch when TOKEN_BUDGET=0; empty: NUM_GENERATIONS",
        minimum=1,
        maximum=1024,  # NUM_GENERATIONS' bound: one micro-batch of the largest group
    ),
    Field(
        "MAX_STALENESS",
        "text",
        "auto",
        "TRL's max_staleness in optimizer steps; auto: 4 x the steps one group spans (trainer/rollouts/staleness.py)",
        fix="set a whole number of optimizer steps >= 0, or auto (4 x the steps one group spans)",
    ),
    # 1024 micro-batches per optimizer step is already far past any GRPO recipe (1-16).
    Field("GRADIENT_ACCUMULATION_STEPS", "integer", 1, "micro-batches per optimizer step", minimum=1, maximum=1024),
    Field(
        "SAVE_STEPS",
        "integer",
        25,
        "save a checkpoint every N optimizer steps",
        fix="set it to at least 1 (0 would never save a checkpoint)",
        minimum=1,
        maximum=MAX_STEPS_BOUND,
        fix_above=f"set it to at most {MAX_STEPS_BOUND} (MAX_STEPS' bound), e.g. 25",
    ),
    # The disk guard sizes the bucket for (SAVE_TOTAL_LIMIT + 1) checkpoints of ~12 GB each (Qwen3-1.7B, float32
    # weights + AdamW): a thousand is already 12 TB.
    Field(
        "SAVE_TOTAL_LIMIT",
        "integer",
        2,
        "checkpoints kept per run",
        minimum=1,
        maximum=1000,
        fix_above="set it to at most 1000 (the bucket must hold SAVE_TOTAL_LIMIT + 1 checkpoints; the disk guard "
        "sizes it)",
    ),
    F.REPORT_TO,
    # TRL 1.16.0's weight_sync_timeout (async_grpo_config.py; weight_transfer.py bounds the NCCL group's set-up, the
    # transfer and its finalisation with it) defaults to 1800 s: a dead or hung engine held the GPUs idle for half
    # an hour per push before anything said why. Measured (docs/GPU-STACK.md, DESIGN.md), a whole push of 2.8 GB
    # takes 0.19-0.23 s (0.15-0.23 s of it the NCCL transfer, ~12 GB/s over shared memory): an 8B model in float32
    # (32 GB) ~3 s, 70B in bfloat16 (140 GB) ~12 s, or ~2 minutes across pods on a 10 Gbit/s network. 300 s covers
    # all of these, equals TRL's own bound on pause/resume (_CONTROL_TIMEOUT), and notices a lost engine in 5
    # minutes. Below 10 s a first sync's group set-up could be cut; past TRL's 1800 s the bound is no bound.
    Field(
        "WEIGHT_SYNC_TIMEOUT_S",
        "integer",
        300,
        "seconds a weight push (group set-up, transfer, finalisation) may take before the engine counts as lost",
        fix="set it in 10-1800 seconds (a 2.8 GB push took 0.23 s; 300 notices a lost engine in 5 minutes)",
        minimum=10,
        maximum=1800,
    ),
    F.DEPLOYMENT,
    F.TRAIN_SCRIPT,
    F.ENGINE_MAX_MODEL_LEN,
    Field("TRAINER_COMPILE_LAYERS", "flag", True, "regional torch.compile of the decoder layers on GPU"),
    F.DATASETS,
    Field("SCREENED_TASKS", "text", "", "train only on the tasks screening kept; empty: every task"),
    # float32 weights and AdamW state in both forms; the GPU computes in bfloat16 (stack/sizing/precision.py).
    Field(
        "TRAIN_DTYPE",
        "choice",
        "float32",
        "dtype of the weights and AdamW state; bfloat16 compute on the GPU",
        choices=DTYPES,
    ),
    Field("EVAL_PASS_K", "text", "1", "comma-separated k for pass@k (pass@1 is always reported)"),
    Field(
        "EVAL_ATTEMPTS",
        "integer",
        None,
        "attempts per eval task; empty: the largest k in EVAL_PASS_K",
        minimum=1,
        maximum=MAX_EVAL_ATTEMPTS,
    ),
    Field(
        "EVAL_STEPS",
        "integer",
        0,
        "evaluate every this many optimizer steps; 0: never during training",
        minimum=0,
        maximum=MAX_STEPS_BOUND,
    ),
    F.EVAL_DATASETS,
    Field("EVAL_TEMPERATURE", "number", 0.6, "eval sampling temperature", minimum=0, maximum=MAX_TEMPERATURE),
    Field("EVAL_TOP_P", "number", 0.95, "eval nucleus sampling", minimum=0, maximum=1),
    # Harmless above the tasks served (it means all of them); bounded so a typo reads as one.
    Field("EVAL_MAX_TASKS", "integer", 0, "at most this many eval tasks; 0: all", minimum=0, maximum=1_000_000),
    # Each eval rollout is a sandbox, as in training (MAX_INFLIGHT_ROLLOUTS' bound).
    Field("EVAL_CONCURRENCY", "integer", 4, "eval rollouts at once", minimum=1, maximum=1024),
    Field("EVAL_BASELINE", "text", None, "the base model's eval.json; empty: <bucket>/evals/baseline/eval.json"),
    Field("HUB_MODEL_ID", "text", "", "Hub repository to push the final model to; empty: nothing is pushed"),
    Field("HUB_TOKEN", "text", "", "write token for HUB_MODEL_ID; empty: huggingface_hub's own lookup", secret=True),
    Field("HUB_PUSH_CHECKPOINTS", "flag", False, "also push every checkpoint as it is saved"),
    Field("HUB_PRIVATE", "flag", True, "create the repository private"),
    Field("HF_ENDPOINT", "text", "https://huggingface.co", "the Hub's address (a mirror, or a test's stand-in)"),
    # The delay doubles per try: at the default 30 s, try 20 would start after 30 s x (2^19 - 1), half a year on.
    Field("HUB_PUSH_ATTEMPTS", "integer", 5, "tries per push", minimum=1, maximum=20),
    Field("HUB_RETRY_S", "number", 30.0, "seconds before the first retry; doubles per try", minimum=0, maximum=3600),
    # The trainer holds its GPU while it waits: a day is past any push of a model that fits on it.
    Field(
        "HUB_FINAL_WAIT_S",
        "number",
        1800.0,
        "seconds the trainer waits at exit for the final push",
        minimum=0,
        maximum=86_400,
    ),
)


# How the table's rows are held (Table.attributes): each as its lowercased name, but for these.
RENAMED = {
    "MAX_OUTPUT_TOKENS": "max_completion_tokens",
    "CHECKPOINT_ROOT": "checkpoint_root_override",
    "TRAINER_COMPILE_LAYERS": "compile_layers",
}
# Held in `evaluation` (EvalSettings, eval_from_env) and `hub` (HubSettings, hub_from_env), not as attributes; and
# the two rows read after those (a refusal's lines come in the order they always came), held by hand below.
READ_LAST = ("SCREENED_TASKS", "TRAIN_DTYPE")
APART = READ_LAST + tuple(n for n in FIELDS.fields if n.startswith(("EVAL_", "HUB_")) or n == "HF_ENDPOINT")


@dataclass
class Settings(make_dataclass("TableSettings", FIELDS.attributes(RENAMED, APART))):
    """One attribute per row of FIELDS (RENAMED, APART), and what the reader derives. Of note: `engine_url` is the
    engine's root (weight sync, /health; rollouts get its OpenAI base, `llm_url`); `max_staleness` is TRL's (None:
    derived from the batch shape, trainer/rollouts/staleness.py); `weight_sync_timeout_s` is TRL's weight_sync_timeout and
    the mock backend's per-call timeout (a push that outlasts it means the engine is gone or hung:
    trainer/watch/engine_gone.py stops the run with a checkpoint); `deployment` (stack/deployment.py) decides the resume
    steps a stopped run prints; `compile_layers` is the regional torch.compile of the decoder layers on GPU (28-37%
    -> 34-37% MFU and 0.235 -> 0.184 GiB per 1k packed tokens on an H200, docs/GPU-BENCHMARK.md); `datasets` are
    the splits trained on (empty: every split served); `dtype` is the weights' and AdamW state's (float32 in both
    forms, bfloat16 compute on the GPU: stack/sizing/precision.py says why)."""

    run_name_explicit: bool = False
    screened_tasks: str = FIELDS["SCREENED_TASKS"].default
    dtype: str = FIELDS["TRAIN_DTYPE"].default
    # --- evaluation, screening, Hub publishing (trainer/evaluation/evaluate.py, screen.py; trainer/hub/publish.py) ---
    evaluation: EvalSettings = field(default_factory=EvalSettings)
    hub: HubSettings = field(default_factory=HubSettings)

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


def _max_staleness(r: Env, raw: str) -> int | None:
    """None for auto (derived from the batch shape at start, trainer/rollouts/staleness.py), else the whole number."""
    if raw.strip().lower() == "auto":
        return None
    if raw.strip().isdigit() and int(raw.strip()) <= MAX_STEPS_BOUND:
        return int(raw.strip())
    if raw.strip().isdigit():
        return r.refuse(
            f"MAX_STALENESS={raw!r} is above {MAX_STEPS_BOUND}: set it to at most MAX_STEPS' bound, or auto "
            "(4 x the steps one group spans)",
            None,
        )
    return r.refuse(
        f"MAX_STALENESS={raw!r} is not auto or a whole number: {FIELDS['MAX_STALENESS'].fix} (default auto)", None
    )


def read(env: Mapping[str, str] | None = None) -> tuple[Settings, list[str]]:
    """The trainer's settings and every problem with them, one line each. The ONE definition: the
    trainer starts from it, and preflight (guards `trainer-settings`) reports its problems before any
    GPU time is spent (otherwise a MAX_STEPS=2e2 passes preflight and ends as a bare traceback in the
    trainer after the engine has loaded). A bad value reads as its default, so the reads that depend on it
    still run."""
    r = Env(env, collect=True)

    def get(name: str, default=_UNSET):
        return r.get(FIELDS[name]) if default is _UNSET else r.get(FIELDS[name], default)

    model, harness, max_steps = get("MODEL"), get("HARNESS"), get("MAX_STEPS")
    explicit = get("RUN_NAME")
    bucket_dir = get("BUCKET_DIR")
    root = get("CHECKPOINT_ROOT") or str(Path(bucket_dir) / "checkpoints")
    if explicit and (why := names.problem("RUN_NAME", explicit, root, fix="or leave it empty for a fresh name")):
        explicit = r.refuse(why, "")
    num_generations = get("NUM_GENERATIONS")
    weight_transfer = get("WEIGHT_TRANSFER")
    settings = Settings(
        **FIELDS.read_all(
            r,
            RENAMED,
            APART,
            given={
                "MODEL": model,
                "HARNESS": harness,
                "MAX_STEPS": max_steps,
                "RUN_NAME": explicit or fresh_run_name(model, harness, max_steps),
                "NUM_GENERATIONS": num_generations,
                "WEIGHT_TRANSFER": weight_transfer,
                "BUCKET_DIR": bucket_dir,
                "ENGINE_URL": lambda: read_engine_url(r),
                "PER_DEVICE_TRAIN_BATCH_SIZE": lambda: get("PER_DEVICE_TRAIN_BATCH_SIZE", num_generations),
                "MAX_STALENESS": lambda: _max_staleness(r, get("MAX_STALENESS")),
            },
        ),
        run_name_explicit=bool(explicit),
        evaluation=eval_from_env(r, bucket_dir),
        hub=hub_from_env(r),
        screened_tasks=get("SCREENED_TASKS"),
        dtype=get("TRAIN_DTYPE"),
    )
    if settings.max_completion_tokens >= settings.engine_max_model_len:
        # Every call's prompt (the system prompt and task alone are hundreds of tokens) must fit beside it.
        r.refuse(
            f"MAX_OUTPUT_TOKENS={settings.max_completion_tokens} leaves no room for a prompt in "
            f"ENGINE_MAX_MODEL_LEN={settings.engine_max_model_len}: set MAX_OUTPUT_TOKENS well below it "
            f"(default {FIELDS['MAX_OUTPUT_TOKENS'].default}), or raise ENGINE_MAX_MODEL_LEN",
            None,
        )
    cross_field_rules(r, settings)
    return settings, r.problems


def cross_field_rules(r: Env, s: Settings) -> None:
    """Pairs of trainer settings that each pass alone and contradict each other, one line each (preflight's
    trainer-settings reports them before the engine is paid for)."""
    if s.save_steps > s.max_steps and r.raw("SAVE_STEPS") is not None:
        # The Trainer saves every SAVE_STEPS steps and at the last: a run shorter than that has nothing to resume
        # from until it ends. Only a SAVE_STEPS the operator set: the default with a short MAX_STEPS is no choice.
        r.refuse(
            f"SAVE_STEPS={s.save_steps} is longer than the run (MAX_STEPS={s.max_steps}), so no checkpoint would be "
            f"saved before its end and a crash would lose every step: set SAVE_STEPS to at most {s.max_steps}",
            None,
        )
    if s.hub.push_checkpoints and not s.hub.model_id:
        r.refuse(
            "HUB_PUSH_CHECKPOINTS=1 but HUB_MODEL_ID is empty, so there is no repository to push them to: set "
            "HUB_MODEL_ID (e.g. your-name/qwen3-harbor-grpo), or HUB_PUSH_CHECKPOINTS=0",
            None,
        )


def from_env(env: Mapping[str, str] | None = None) -> Settings:
    """The settings, or EnvError listing every problem (preflight reported them first)."""
    settings, problems = read(env)
    if problems:
        raise EnvError(problems)
    return settings


def eval_from_env(r: Env, bucket_dir: str) -> EvalSettings:
    raw_k = r.get(FIELDS["EVAL_PASS_K"])
    try:
        ks = {int(k) for k in _splits(raw_k)}
        if any(k < 1 for k in ks):
            raise ValueError(raw_k)
    except ValueError:
        ks = r.refuse(
            f"EVAL_PASS_K={raw_k!r} is not a list of positive whole numbers: set it like 1,4,8 (default 1)", {1}
        )
    if max(ks, default=1) > MAX_EVAL_ATTEMPTS:
        # EVAL_ATTEMPTS defaults to the largest k, and a default is not bounds-checked: the k is, here.
        ks = r.refuse(
            f"EVAL_PASS_K={raw_k} asks for pass@{max(ks)}: set each k to at most {MAX_EVAL_ATTEMPTS} (EVAL_ATTEMPTS' "
            "bound: scored attempts per eval task)",
            {1},
        )
    pass_k = tuple(sorted(ks | {1}))
    attempts = r.get(FIELDS["EVAL_ATTEMPTS"], max(pass_k))
    if attempts < max(pass_k):
        r.refuse(
            f"EVAL_PASS_K={','.join(map(str, pass_k))} needs EVAL_ATTEMPTS >= {max(pass_k)} attempts per task "
            f"(EVAL_ATTEMPTS={attempts}): raise EVAL_ATTEMPTS or lower EVAL_PASS_K",
            None,
        )
    return EvalSettings(
        steps=r.get(FIELDS["EVAL_STEPS"]),
        datasets=r.get(FIELDS["EVAL_DATASETS"]),
        attempts=attempts,
        pass_k=pass_k,
        temperature=r.get(FIELDS["EVAL_TEMPERATURE"]),
        top_p=r.get(FIELDS["EVAL_TOP_P"]),
        max_tasks=r.get(FIELDS["EVAL_MAX_TASKS"]),
        concurrency=r.get(FIELDS["EVAL_CONCURRENCY"]),
        baseline=r.get(FIELDS["EVAL_BASELINE"], str(Path(bucket_dir) / "evals" / "baseline" / "eval.json")),
    )


def hub_repo_problem(repo_id: str) -> str | None:
    """Why `repo_id` is not a Hub repository id, by huggingface_hub's own rule (utils.validate_repo_id, read at
    1.33.0), or None. Checked at start: otherwise a malformed id is found by the push at the end of the night.
    The trainer and preflight images carry huggingface_hub; the host's unit-test venv does not, and there
    nothing is checked (tests/integration/trainer/test_hub_settings.py runs this in the trainer image)."""
    try:
        from huggingface_hub.utils import HFValidationError, validate_repo_id
    except ImportError:  # stack stays importable by the standard library alone (scripts/status, the engine image)
        return None
    try:
        validate_repo_id(repo_id)
    except HFValidationError as exc:
        return str(exc)
    return None


def hub_from_env(r: Env) -> HubSettings:
    model_id = r.get(FIELDS["HUB_MODEL_ID"])
    if model_id and (why := hub_repo_problem(model_id)):
        model_id = r.refuse(
            f"HUB_MODEL_ID={model_id!r} is not a Hub repository id ({why}): set it like "
            "your-name/qwen3-harbor-grpo, or leave it empty to push nothing",
            "",
        )
    return HubSettings(
        model_id=model_id,
        token=r.get(FIELDS["HUB_TOKEN"]),
        push_checkpoints=r.get(FIELDS["HUB_PUSH_CHECKPOINTS"]),
        private=r.get(FIELDS["HUB_PRIVATE"]),
        endpoint=r.get(FIELDS["HF_ENDPOINT"]),
        attempts=r.get(FIELDS["HUB_PUSH_ATTEMPTS"]),
        retry_s=r.get(FIELDS["HUB_RETRY_S"]),
        final_wait_s=r.get(FIELDS["HUB_FINAL_WAIT_S"]),
    )
