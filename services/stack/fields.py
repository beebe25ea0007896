"""The settings more than one service reads, each declared once: name, type, bounds, default, doc, fix.

A service's own table (stack/readers/trainer.py, stack/readers/env_server.py, stack/readers/tunnel_check.py,
engine/command.py, guards/checks.py, ...) includes the ones it reads from here, so preflight and the
service refuse a value with the same line. Standard library only, like the rest of `stack`.
"""

from __future__ import annotations

from .backends import E2B_API_KEY, SANDBOXES, TUNNEL_PROVIDERS, WEIGHT_TRANSFERS
from .endpoints import ENGINE_URL
from .env import Field, Table
from .facts import (
    AGENT_INSTALLS,
    BUCKET_DIR,
    BUCKET_OPT_OUT_PHRASE,
    CAPTURE_HOST_OPT_OUT_PHRASE,
    DEFAULT_DATASET,
    DEFAULT_PORTS,
    DEFAULT_STEP_LIMIT,
    HANDOFF_DIR,
    LOOPBACK_HOSTS,
)

MODEL = Field(
    "MODEL",
    "text",
    "Qwen/Qwen3-1.7B",
    "Hugging Face model id (or a path under the bucket) served by the engine and trained by the trainer",
    blank_refused=True,
)
DATASETS = Field(
    "DATASETS",
    "words",
    (DEFAULT_DATASET,),
    "comma-separated task datasets: Hub ids, Harbor name@version, or folders inside the env server",
    blank_refused=True,
)
EVAL_DATASETS = Field("EVAL_DATASETS", "words", (), "held-out datasets, served too, never trained on")
# stack/datasets.py: what a task may be. The agent gets the whole instruction on every turn, and the Task API
# shows the same text (env_server/task_env.py). 1,000,000 characters is ~250k tokens: past any context served.
TASK_INSTRUCTION_MAX_CHARS = Field(
    "TASK_INSTRUCTION_MAX_CHARS",
    "integer",
    20000,
    "longest task instruction served, in characters; a longer one is a bad task",
    minimum=1,
    maximum=1_000_000,
)
DATASET_BAD_TASKS = Field(
    "DATASET_BAD_TASKS",
    "choice",
    "refuse",
    "a task that fails the dataset check: refuse (env-server does not start) or skip (served without it, counted)",
    choices=("refuse", "skip"),
)
# The choices, and the line that lists them, come from the registries (stack/backends.py).
SANDBOX = Field("SANDBOX", "choice", "e2b", "where rollouts run", fix=SANDBOXES.fix, choices=SANDBOXES.names)
TUNNEL_PROVIDER = Field(
    "TUNNEL_PROVIDER",
    "choice",
    "cloudflared",
    "how the capture proxy is published",
    fix=TUNNEL_PROVIDERS.fix,
    choices=TUNNEL_PROVIDERS.names,
    aliases=TUNNEL_PROVIDERS.aliases,
)
DIRECT_URL = Field(
    "DIRECT_URL",
    "url",
    "",
    "TUNNEL_PROVIDER=direct: the capture proxy's URL as a sandbox reaches it",
    fix="set DIRECT_URL with its scheme, e.g. http://172.17.0.1:8100 (https:// for E2B sandboxes)",
)
CAPTURE_HOST = Field("CAPTURE_HOST", "text", "127.0.0.1", "address the capture proxy binds; never a wildcard")
CAPTURE_HOST_BEYOND_TUNNEL_OK = Field(
    "CAPTURE_HOST_BEYOND_TUNNEL_OK",
    "phrase",
    "",
    "behind a tunnel: the opt-out for a CAPTURE_HOST other than loopback or the sandbox bridge",
    fix=f"set it to exactly {CAPTURE_HOST_OPT_OUT_PHRASE}, or leave it empty",
    choices=(CAPTURE_HOST_OPT_OUT_PHRASE,),
)
ENGINE_HOST = Field(
    "ENGINE_HOST",
    "choice",
    "127.0.0.1",
    "address the engine binds (loopback under compose)",
    fix="the engine is on the host network and must bind 127.0.0.1 (only the capture proxy is public); "
    "set ENGINE_HOST=127.0.0.1",
    choices=LOOPBACK_HOSTS,
)
ENGINE_PORT = Field("ENGINE_PORT", "port", DEFAULT_PORTS["ENGINE_PORT"], "the engine's OpenAI server")
ENV_SERVER_PORT = Field("ENV_SERVER_PORT", "port", DEFAULT_PORTS["ENV_SERVER_PORT"], "the env server's Task API")
CAPTURE_PORT = Field("CAPTURE_PORT", "port", DEFAULT_PORTS["CAPTURE_PORT"], "the capture proxy (the public port)")
TUNNEL_METRICS_PORT = Field(
    "TUNNEL_METRICS_PORT", "port", DEFAULT_PORTS["TUNNEL_METRICS_PORT"], "cloudflared's metrics server"
)
TUNNEL_LOG = Field("TUNNEL_LOG", "text", "", "cloudflared's --logfile (quick tunnel URL discovery)")
ENV_SERVER_URL = Field("ENV_SERVER_URL", "url", "http://127.0.0.1:8000", "the env server's Task API")
PORTS = Table(ENGINE_PORT, ENV_SERVER_PORT, CAPTURE_PORT, TUNNEL_METRICS_PORT)
# Upper bounds below are for values that can only be typos; each is well past what a real run uses, and says why.
# The capture port serves at most CAPTURE_MAX_CONCURRENT <= 1024 model calls at once (one per in-flight rollout):
# more rollouts than that would only queue on its 429s, each holding a paid sandbox.
MAX_INFLIGHT_ROLLOUTS = Field(
    "MAX_INFLIGHT_ROLLOUTS",
    "integer",
    8,
    "rollouts in flight at once (each is one sandbox)",
    minimum=1,
    maximum=1024,
)
# 2^20 tokens: the longest context of any model this stack can train (Qwen2.5-1M); the trainer packs a whole
# rollout into one sequence, and 64k tokens of a 1.7B model already ran an H200 out of memory (DESIGN.md).
MAX_CONTEXT_TOKENS = 1_048_576
MAX_OUTPUT_TOKENS = Field(
    "MAX_OUTPUT_TOKENS",
    "integer",
    4096,
    "longest completion per model call, enforced by the capture proxy and trained at that length",
    minimum=1,
    maximum=MAX_CONTEXT_TOKENS,
)
ENGINE_MAX_MODEL_LEN = Field(
    "ENGINE_MAX_MODEL_LEN",
    "integer",
    32768,
    "longest prompt + completion the engine accepts",
    minimum=1,
    maximum=MAX_CONTEXT_TOKENS,
)
# The engine (vLLM) and its CPU stand-in (the mock engine) both stop turns by it: stack/serving/turn_end.py.
TURN_END_TOKENS = Field(
    "TURN_END_TOKENS",
    "text",
    "auto",
    "tokens that end a model turn: auto (the one the chat template closes an assistant turn with), model "
    "(the model's generation config as is), or a comma-separated list such as <|im_end|>",
    fix="set TURN_END_TOKENS to auto, model, or a comma-separated list of tokens, e.g. <|im_end|>",
)
# The engine (vLLM) and the mock engine serve a chat template under which turns chain: stack/serving/template_fix.py,
# stack/serving/chain.py, stack/serving/served_template.py.
CHAT_TEMPLATE_FIX = Field(
    "CHAT_TEMPLATE_FIX",
    "choice",
    "auto",
    "auto: serve a think-gated template (Qwen3, Qwen3.5) rewritten so history keeps its think blocks and turns "
    "chain; off: the model's template as published",
    choices=("auto", "off"),
)
TURN_CHAIN_CHECK = Field(
    "TURN_CHAIN_CHECK",
    "choice",
    "refuse",
    "refuse: the engine does not start when a replayed tool conversation forks under the served template and "
    "parsers; warn: it starts and says so",
    choices=("refuse", "warn"),
)
AGENT_STEP_LIMIT = Field(
    "AGENT_STEP_LIMIT",
    "integer",
    DEFAULT_STEP_LIMIT,
    "model calls per rollout; always on (a chained rollout's memory grows with its turns)",
    fix="set a positive number of model calls; 0 or less would leave rollouts unbounded (a chained "
    "rollout's packed length, and the trainer's memory, grows with every turn: 58-turn rollouts ran an "
    "80 GiB card out of memory)",
    minimum=1,
    # Seventeen times the turns that already ran an 80 GiB card out of memory; agent benchmarks stop at 100-250.
    maximum=1000,
    fix_above="set it to at most 1000 model calls (58-turn rollouts already ran an 80 GiB card out of memory; "
    "agent benchmarks stop at 100-250)",
)
AGENT_INSTALL = Field(
    "AGENT_INSTALL", "choice", "online", "how mini-swe-agent gets into a sandbox", choices=AGENT_INSTALLS
)
WEIGHT_TRANSFER = Field(
    "WEIGHT_TRANSFER",
    "choice",
    "nccl",
    "how new weights reach the engine after each step",
    fix=WEIGHT_TRANSFERS.fix,
    choices=WEIGHT_TRANSFERS.names,
)
BUCKET_DIR = Field("BUCKET_DIR", "path", BUCKET_DIR, "the bucket inside the containers")
BUCKET_NOT_A_MOUNT_OK = Field(
    "BUCKET_NOT_A_MOUNT_OK",
    "phrase",
    "",
    "the opt-out for training into a bucket folder that is not a real mount",
    fix=f"set it to exactly {BUCKET_OPT_OUT_PHRASE} (or leave it empty and mount the bucket at BUCKET_PATH)",
    choices=(BUCKET_OPT_OUT_PHRASE,),
)
HANDOFF_DIR = Field("HANDOFF_DIR", "path", HANDOFF_DIR, "the tunnel hand-off volume")
RUN_NAME = Field("RUN_NAME", "text", "", "empty: a fresh name; set: resume that run")
CHECKPOINT_ROOT = Field("CHECKPOINT_ROOT", "path", "", "where runs are saved; empty: <bucket>/checkpoints")
TRAIN_SCRIPT = Field("TRAIN_SCRIPT", "text", "", "training-script override: a path or an http(s) URL")
HF_HOME = Field("HF_HOME", "text", "", "the Hugging Face cache; on the bucket")
REPORT_TO_CHOICES = ("trackio", "tensorboard", "wandb", "none")
REPORT_TO = Field("REPORT_TO", "choice", "trackio", "where metrics go", choices=REPORT_TO_CHOICES)
STACK_NAME = Field("STACK_NAME", "text", "", "names this stack's sandboxes; empty: the compose project")
DEPLOYMENT = Field(
    "DEPLOYMENT",
    "choice",
    "compose",
    "where the stack runs (stack/deployment.py)",
    fix="use compose (the default, docker compose) or kubernetes (set by the Helm chart in deploy/helm)",
    choices=("compose", "kubernetes"),
)

SHARED = Table(
    MODEL,
    DATASETS,
    EVAL_DATASETS,
    TASK_INSTRUCTION_MAX_CHARS,
    DATASET_BAD_TASKS,
    SANDBOX,
    E2B_API_KEY,
    TUNNEL_PROVIDER,
    DIRECT_URL,
    CAPTURE_HOST,
    CAPTURE_HOST_BEYOND_TUNNEL_OK,
    ENGINE_HOST,
    PORTS,
    TUNNEL_LOG,
    ENGINE_URL,
    ENV_SERVER_URL,
    MAX_INFLIGHT_ROLLOUTS,
    MAX_OUTPUT_TOKENS,
    ENGINE_MAX_MODEL_LEN,
    TURN_END_TOKENS,
    AGENT_STEP_LIMIT,
    AGENT_INSTALL,
    WEIGHT_TRANSFER,
    BUCKET_DIR,
    BUCKET_NOT_A_MOUNT_OK,
    HANDOFF_DIR,
    RUN_NAME,
    CHECKPOINT_ROOT,
    TRAIN_SCRIPT,
    HF_HOME,
    REPORT_TO,
    STACK_NAME,
    DEPLOYMENT,
)
