"""The `vllm serve` command line for the production engine, built from the environment.

Pure (no vllm import) so it is unit-tested on a CPU host. Two kinds of flag are fixed here rather than
configurable, because without them the engine answers every request perfectly and trains nothing:

- capture: `--return-tokens-as-token-ids` and `--logprobs-mode processed_logprobs` (token ids and the
  sampling distribution's logprobs; without them every training row is empty or carries the wrong
  importance ratio), `--weight-transfer-config '{"backend":"nccl"}'` (TRL's AsyncGRPO weight sync; `ipc` in the
  one-GPU form, from WEIGHT_TRANSFER);
- binding: under compose the engine is on the host network and must listen on loopback only. On
  Kubernetes (DEPLOYMENT=kubernetes) it has the pod's own network namespace and listens on the pod's
  address (the chart passes status.podIP) for the env server and trainer pods; NetworkPolicies keep it in.

ENGINE_EXTRA_ARGS may add anything else, but may not restate or negate a managed flag: a second
`--logprobs-mode` would silently win (argparse keeps the last one), and a flag that is governed by an
environment variable must be changed there so compose, preflight and the launcher agree.
`--generation-config` is the launcher's too unless TURN_END_TOKENS=model: it carries the stop set that
agrees with the chat template's turn end (stack/serving/turn_end.py, engine/stops.py).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping

from stack import deployment, fields
from stack.backends import WEIGHT_TRANSFERS
from stack.env import Env, EnvError, Field, Table
from stack.facts import LOOPBACK_HOSTS
from stack.serving import turn_end

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

# `--weight-transfer-config`'s backend is WEIGHT_TRANSFER's (stack/backends.py): nccl (a GPU each), ipc (one GPU).
WEIGHT_TRANSFER_CONFIG = '{{"backend":"{}"}}'
GPU_FRACTION_FIX = "set ENGINE_GPU_MEMORY_UTILIZATION to a fraction of the GPU in (0, 1], e.g. 0.85"

FIELDS = Table(
    fields.MODEL,
    fields.DEPLOYMENT,
    fields.ENGINE_HOST,
    fields.ENGINE_PORT,
    fields.ENGINE_MAX_MODEL_LEN,
    fields.TURN_END_TOKENS,
    fields.WEIGHT_TRANSFER,
    fields.CHAT_TEMPLATE_FIX,
    fields.TURN_CHAIN_CHECK,
    Field(
        "ENGINE_GPU_MEMORY_UTILIZATION",
        "number",
        0.85,
        "share of the engine GPU's memory vLLM may take",
        fix=GPU_FRACTION_FIX,
        maximum=1.0,
    ),
    Field("ENGINE_TENSOR_PARALLEL_SIZE", "integer", 1, "vLLM tensor-parallel size", minimum=1),
    Field("ENGINE_DATA_PARALLEL_SIZE", "integer", 1, "vLLM data-parallel size", minimum=1),
    Field("ENGINE_DTYPE", "text", "bfloat16", "engine precision; agrees with the trainer's"),
    Field("TOOL_CALL_PARSER", "text", "hermes", "vLLM's tool-call parser for this model family"),
    Field("REASONING_PARSER", "text", "", "vLLM's reasoning parser, e.g. qwen3; empty: none"),
    Field("CHAT_TEMPLATE_KWARGS", "text", "", "JSON passed as --default-chat-template-kwargs"),
    Field("ENGINE_EXTRA_ARGS", "text", "", "extra `vllm serve` arguments; required flags cannot be overridden"),
    Field(
        "ENGINE_LOGPROBS_UNPROVEN_OK",
        "text",
        "",
        "the served model id whose processed logprobs the probe may accept unproven",
    ),
)


def _flag_name(token: str) -> str:
    """`--foo=bar` -> `--foo`; vLLM also accepts underscores (`--max_model_len`)."""
    name = token.split("=", 1)[0]
    if name.startswith("--"):
        name = "--" + name[2:].replace("_", "-")
    return name


def _gpu_fraction(read: Env) -> str:
    value = read.get(FIELDS["ENGINE_GPU_MEMORY_UTILIZATION"])
    if value <= 0:
        raise EnvError(f"ENGINE_GPU_MEMORY_UTILIZATION={value:g} is not in (0, 1]: {GPU_FRACTION_FIX}")
    return f"{value:g}"


def extra_value(extra: list[str], flag: str) -> str | None:
    """The value ENGINE_EXTRA_ARGS gives `flag` (`--flag v` or `--flag=v`; the last one wins, as argparse),
    "" for a bare flag, None when absent."""
    found = None
    for i, token in enumerate(extra):
        if token.startswith("-") and _flag_name(token) == flag:
            if "=" in token:
                found = token.split("=", 1)[1]
            else:
                nxt = extra[i + 1] if i + 1 < len(extra) else ""
                found = "" if nxt.startswith("-") else nxt
    return found


def extra_args(env: Mapping[str, str]) -> list[str]:
    try:
        return shlex.split(Env(env).get(FIELDS["ENGINE_EXTRA_ARGS"]))
    except ValueError as exc:
        raise EnvError(f"ENGINE_EXTRA_ARGS cannot be parsed as shell words ({exc}); fix its quoting") from None


def check_extra_args(extra: list[str]) -> None:
    """Refuse extra arguments that would undo a required flag, take over a managed one, or bind wide."""
    for i, token in enumerate(extra):
        if not token.startswith("-"):
            continue
        name = _flag_name(token)
        value = token.split("=", 1)[1] if "=" in token else (extra[i + 1] if i + 1 < len(extra) else "")
        if name == "--host" and value not in LOOPBACK_HOSTS:
            raise EnvError(
                f"ENGINE_EXTRA_ARGS binds the engine to {value or 'an unspecified host'!r}: the engine is on "
                "the host network and must listen on 127.0.0.1 only (only the capture proxy is public); "
                "remove --host from ENGINE_EXTRA_ARGS"
            )
        negated = "--" + name[len("--no-") :] if name.startswith("--no-") else None
        if name in REQUIRED_CAPTURE_FLAGS or negated in REQUIRED_CAPTURE_FLAGS:
            raise EnvError(
                f"ENGINE_EXTRA_ARGS contains {token!r}, which overrides a flag the training path requires "
                "(--return-tokens-as-token-ids, --logprobs-mode processed_logprobs, "
                "--weight-transfer-config, --enable-auto-tool-choice); remove it from ENGINE_EXTRA_ARGS"
            )
        if name in MANAGED_FLAGS:
            raise EnvError(
                f"ENGINE_EXTRA_ARGS contains {name}, which the launcher sets from {MANAGED_FLAGS[name]}; "
                f"set {MANAGED_FLAGS[name]} in .env instead"
            )


def build_command(
    env: Mapping[str, str], generation_config: str | None = None, chat_template: str | None = None
) -> list[str]:
    """The full argv for `vllm serve`, or EnvError naming the setting to fix. `generation_config`: the
    folder engine/stops.py wrote the agreed stop set into (None: vLLM reads the model's own).
    `chat_template`: the file stack/serving/served_template.py wrote the derived template into (None: the model's)."""
    read = Env(env)

    def get(name: str):
        return read.get(FIELDS[name])

    model = get("MODEL")
    where = get("DEPLOYMENT")
    # In a pod (DEPLOYMENT=kubernetes) the engine binds the pod's interface; NetworkPolicies keep it in.
    host = (
        read.text("ENGINE_HOST", fields.ENGINE_HOST.default) if where == deployment.KUBERNETES else get("ENGINE_HOST")
    )
    port = str(get("ENGINE_PORT"))
    tool_parser = get("TOOL_CALL_PARSER")

    argv = [
        "vllm",
        "serve",
        model,
        "--host",
        host,
        "--port",
        port,
        "--max-model-len",
        str(get("ENGINE_MAX_MODEL_LEN")),
        "--gpu-memory-utilization",
        _gpu_fraction(read),
        "--tensor-parallel-size",
        str(get("ENGINE_TENSOR_PARALLEL_SIZE")),
        "--data-parallel-size",
        str(get("ENGINE_DATA_PARALLEL_SIZE")),
        "--dtype",
        get("ENGINE_DTYPE"),
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        tool_parser,
    ]
    reasoning = get("REASONING_PARSER")
    if reasoning:
        argv += ["--reasoning-parser", reasoning]
    kwargs = get("CHAT_TEMPLATE_KWARGS")
    if kwargs:
        try:
            parsed = json.loads(kwargs)
        except ValueError as exc:
            raise EnvError(
                f"CHAT_TEMPLATE_KWARGS is not JSON ({exc}); write a JSON object, e.g. '{{\"enable_thinking\": false}}'"
            ) from None
        if not isinstance(parsed, dict):
            raise EnvError("CHAT_TEMPLATE_KWARGS must be a JSON object, e.g. '{\"enable_thinking\": false}'")
        argv += ["--default-chat-template-kwargs", json.dumps(parsed, separators=(",", ":"))]
    argv += [
        "--return-tokens-as-token-ids",
        "--logprobs-mode",
        "processed_logprobs",
        "--weight-transfer-config",
        WEIGHT_TRANSFER_CONFIG.format(_engine_backend(read)),
    ]
    setting = turn_end.parse_setting(get("TURN_END_TOKENS"))
    if generation_config:
        argv += ["--generation-config", generation_config]
    if chat_template:
        argv += ["--chat-template", chat_template]
    extra = extra_args(env)
    check_extra_args(extra)
    if setting != turn_end.MODEL and extra_value(extra, "--generation-config") is not None:
        raise EnvError(
            f"ENGINE_EXTRA_ARGS contains --generation-config, which the launcher sets to stop turns where the "
            f"chat template ends them (TURN_END_TOKENS={get('TURN_END_TOKENS')}); remove it, or set "
            "TURN_END_TOKENS=model to serve the model's own stop set with your --generation-config"
        )
    return argv + extra


def _engine_backend(read: Env) -> str:
    transfer = WEIGHT_TRANSFERS.get(read.get(FIELDS["WEIGHT_TRANSFER"]))
    if not transfer.engine_backend:
        raise EnvError(
            f"WEIGHT_TRANSFER={transfer.name} is not a vLLM weight transfer: set WEIGHT_TRANSFER=nccl (a GPU each) "
            "or ipc (one GPU, compose.one-gpu.yaml)"
        )
    return transfer.engine_backend


def build_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The environment `vllm serve` runs with: dev mode on (TRL's /pause, /resume and weight routes), and for
    WEIGHT_TRANSFER=ipc only, the pickled CUDA IPC handles accepted (VLLM_ALLOW_INSECURE_SERIALIZATION: vLLM's
    ipc_engine.py refuses them otherwise). Anywhere else the switch stays as it came: off unless set."""
    out = dict(env)
    out["VLLM_SERVER_DEV_MODE"] = "1"
    transfer = WEIGHT_TRANSFERS.get(Env(env).get(FIELDS["WEIGHT_TRANSFER"]))
    if transfer.insecure_serialization:
        out["VLLM_ALLOW_INSECURE_SERIALIZATION"] = "1"
    else:
        out.pop("VLLM_ALLOW_INSECURE_SERIALIZATION", None)
    return out
