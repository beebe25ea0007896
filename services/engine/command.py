"""The `vllm serve` command line for the production engine, built from the environment.

Pure (no vllm import) so it is unit-tested on a CPU host. Two kinds of flag are fixed here rather than
configurable, because without them the engine answers every request perfectly and trains nothing:

- capture: `--return-tokens-as-token-ids` and `--logprobs-mode processed_logprobs` (token ids and the
  sampling distribution's logprobs; without them every training row is empty or carries the wrong
  importance ratio), `--weight-transfer-config '{"backend":"nccl"}'` (TRL's AsyncGRPO weight sync);
- binding: under compose the engine is on the host network and must listen on loopback only. On
  Kubernetes (DEPLOYMENT=kubernetes) it has the pod's own network namespace and listens on the pod's
  address (the chart passes status.podIP) for the env server and trainer pods; NetworkPolicies keep it in.

ENGINE_EXTRA_ARGS may add anything else, but may not restate or negate a managed flag: a second
`--logprobs-mode` would silently win (argparse keeps the last one), and a flag that is governed by an
environment variable must be changed there so compose, preflight and the launcher agree.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping

from stack import deployment
from stack.env import Env, EnvError
from stack.facts import DEFAULT_PORTS, LOOPBACK_HOSTS

REQUIRED_CAPTURE_FLAGS = (
    "--return-tokens-as-token-ids",
    "--logprobs-mode",
    "--weight-transfer-config",
    "--enable-auto-tool-choice",
)

# Flags the launcher sets from an environment variable: overriding them in ENGINE_EXTRA_ARGS is refused
# with a pointer to the variable.
MANAGED_FLAGS = {
    "--host": "ENGINE_HOST",
    "--port": "ENGINE_PORT",
    "--model": "MODEL",
    "--max-model-len": "ENGINE_MAX_MODEL_LEN",
    "--gpu-memory-utilization": "ENGINE_GPU_MEMORY_UTILIZATION",
    "--tensor-parallel-size": "ENGINE_TENSOR_PARALLEL_SIZE",
    "-tp": "ENGINE_TENSOR_PARALLEL_SIZE",
    "--data-parallel-size": "ENGINE_DATA_PARALLEL_SIZE",
    "-dp": "ENGINE_DATA_PARALLEL_SIZE",
    "--dtype": "ENGINE_DTYPE",
    "--tool-call-parser": "TOOL_CALL_PARSER",
    "--reasoning-parser": "REASONING_PARSER",
    "--default-chat-template-kwargs": "CHAT_TEMPLATE_KWARGS",
}

WEIGHT_TRANSFER_CONFIG = '{"backend":"nccl"}'


# A bad engine setting; the message is one line that names the fix.
ConfigError = EnvError


def _flag_name(token: str) -> str:
    """`--foo=bar` -> `--foo`; vLLM also accepts underscores (`--max_model_len`)."""
    name = token.split("=", 1)[0]
    if name.startswith("--"):
        name = "--" + name[2:].replace("_", "-")
    return name


def _positive_int(read: Env, key: str, default: int) -> str:
    return str(read.integer(key, default, minimum=1))


def _fraction(read: Env, key: str, default: float) -> str:
    value = read.number(key, default, maximum=1.0, fix=f"set {key} to a fraction of the GPU in (0, 1], e.g. 0.85")
    if value <= 0:
        raise ConfigError(f"{key}={value:g} is not in (0, 1]: set {key} to a fraction of the GPU, e.g. 0.85")
    return f"{value:g}"


def check_extra_args(extra: list[str]) -> None:
    """Refuse extra arguments that would undo a required flag, take over a managed one, or bind wide."""
    for i, token in enumerate(extra):
        if not token.startswith("-"):
            continue
        name = _flag_name(token)
        value = token.split("=", 1)[1] if "=" in token else (extra[i + 1] if i + 1 < len(extra) else "")
        if name == "--host" and value not in LOOPBACK_HOSTS:
            raise ConfigError(
                f"ENGINE_EXTRA_ARGS binds the engine to {value or 'an unspecified host'!r}: the engine is on "
                "the host network and must listen on 127.0.0.1 only (only the capture proxy is public); "
                "remove --host from ENGINE_EXTRA_ARGS"
            )
        negated = "--" + name[len("--no-") :] if name.startswith("--no-") else None
        if name in REQUIRED_CAPTURE_FLAGS or negated in REQUIRED_CAPTURE_FLAGS:
            raise ConfigError(
                f"ENGINE_EXTRA_ARGS contains {token!r}, which overrides a flag the training path requires "
                "(--return-tokens-as-token-ids, --logprobs-mode processed_logprobs, "
                "--weight-transfer-config, --enable-auto-tool-choice); remove it from ENGINE_EXTRA_ARGS"
            )
        if name in MANAGED_FLAGS:
            raise ConfigError(
                f"ENGINE_EXTRA_ARGS contains {name}, which the launcher sets from {MANAGED_FLAGS[name]}; "
                f"set {MANAGED_FLAGS[name]} in .env instead"
            )


def build_command(env: Mapping[str, str]) -> list[str]:
    """The full argv for `vllm serve`, or ConfigError naming the setting to fix."""
    read = Env(env)
    model = read.text("MODEL")
    if not model:
        raise ConfigError("MODEL is empty: set MODEL in .env to a Hugging Face model id or a local path")
    try:
        where = deployment.read(env)
    except deployment.DeploymentError as exc:
        raise ConfigError(str(exc)) from None
    # In a pod (DEPLOYMENT=kubernetes) the engine binds the pod's interface; NetworkPolicies keep it in.
    host = read.text("ENGINE_HOST", "127.0.0.1")
    if where != deployment.KUBERNETES:
        host = read.choice(
            "ENGINE_HOST",
            "127.0.0.1",
            LOOPBACK_HOSTS,
            fix="the engine is on the host network and must bind 127.0.0.1 (only the capture proxy is public); "
            "set ENGINE_HOST=127.0.0.1",
        )
    port = str(read.port("ENGINE_PORT", DEFAULT_PORTS["ENGINE_PORT"]))
    tool_parser = read.text("TOOL_CALL_PARSER")
    if not tool_parser:
        raise ConfigError(
            "TOOL_CALL_PARSER is empty: mini-swe-agent drives the model through OpenAI tool calls, so vLLM "
            "needs the model's parser (e.g. hermes for Qwen3); set TOOL_CALL_PARSER in .env"
        )

    argv = [
        "vllm",
        "serve",
        model,
        "--host",
        host,
        "--port",
        port,
        "--max-model-len",
        _positive_int(read, "ENGINE_MAX_MODEL_LEN", 32768),
        "--gpu-memory-utilization",
        _fraction(read, "ENGINE_GPU_MEMORY_UTILIZATION", 0.85),
        "--tensor-parallel-size",
        _positive_int(read, "ENGINE_TENSOR_PARALLEL_SIZE", 1),
        "--data-parallel-size",
        _positive_int(read, "ENGINE_DATA_PARALLEL_SIZE", 1),
        "--dtype",
        read.text("ENGINE_DTYPE", "bfloat16"),
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        tool_parser,
    ]
    reasoning = read.text("REASONING_PARSER")
    if reasoning:
        argv += ["--reasoning-parser", reasoning]
    kwargs = read.text("CHAT_TEMPLATE_KWARGS")
    if kwargs:
        try:
            parsed = json.loads(kwargs)
        except ValueError as exc:
            raise ConfigError(
                f"CHAT_TEMPLATE_KWARGS is not JSON ({exc}); write a JSON object, e.g. '{{\"enable_thinking\": false}}'"
            ) from None
        if not isinstance(parsed, dict):
            raise ConfigError("CHAT_TEMPLATE_KWARGS must be a JSON object, e.g. '{\"enable_thinking\": false}'")
        argv += ["--default-chat-template-kwargs", json.dumps(parsed, separators=(",", ":"))]
    argv += [
        "--return-tokens-as-token-ids",
        "--logprobs-mode",
        "processed_logprobs",
        "--weight-transfer-config",
        WEIGHT_TRANSFER_CONFIG,
    ]
    try:
        extra = shlex.split(env.get("ENGINE_EXTRA_ARGS") or "")
    except ValueError as exc:
        raise ConfigError(f"ENGINE_EXTRA_ARGS cannot be parsed as shell words ({exc}); fix its quoting") from None
    check_extra_args(extra)
    return argv + extra


def build_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The environment `vllm serve` runs with: dev mode on (TRL's /pause, /resume and weight routes)."""
    out = dict(env)
    out["VLLM_SERVER_DEV_MODE"] = "1"
    return out
