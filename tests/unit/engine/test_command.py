"""The `vllm serve` command line: required capture flags always present, unsafe overrides refused."""

import json
import shlex

import pytest

from engine.command import EnvError, build_command, build_environment, extra_value

BASE = {"MODEL": "Qwen/Qwen3-1.7B", "ENGINE_PORT": "8001", "TOOL_CALL_PARSER": "hermes"}


def flag_value(argv, flag):
    return argv[argv.index(flag) + 1]


def test_defaults_carry_every_flag_the_training_path_needs():
    argv = build_command(BASE)
    assert argv[:3] == ["vllm", "serve", "Qwen/Qwen3-1.7B"]
    assert flag_value(argv, "--host") == "127.0.0.1"
    assert flag_value(argv, "--port") == "8001"
    assert "--return-tokens-as-token-ids" in argv
    assert flag_value(argv, "--logprobs-mode") == "processed_logprobs"
    assert json.loads(flag_value(argv, "--weight-transfer-config")) == {"backend": "nccl"}
    assert "--enable-auto-tool-choice" in argv
    assert flag_value(argv, "--tool-call-parser") == "hermes"
    assert "--reasoning-parser" not in argv
    assert "--default-chat-template-kwargs" not in argv


def test_sizes_parsers_and_template_kwargs_come_from_the_environment():
    argv = build_command(
        {
            **BASE,
            "ENGINE_MAX_MODEL_LEN": "16384",
            "ENGINE_GPU_MEMORY_UTILIZATION": "0.7",
            "ENGINE_TENSOR_PARALLEL_SIZE": "2",
            "ENGINE_DATA_PARALLEL_SIZE": "3",
            "ENGINE_DTYPE": "float16",
            "REASONING_PARSER": "qwen3",
            "CHAT_TEMPLATE_KWARGS": '{"enable_thinking": false}',
            "ENGINE_EXTRA_ARGS": "--enable-prefix-caching --max-num-seqs 64",
        }
    )
    assert flag_value(argv, "--max-model-len") == "16384"
    assert flag_value(argv, "--gpu-memory-utilization") == "0.7"
    assert flag_value(argv, "--tensor-parallel-size") == "2"
    assert flag_value(argv, "--data-parallel-size") == "3"
    assert flag_value(argv, "--dtype") == "float16"
    assert flag_value(argv, "--reasoning-parser") == "qwen3"
    assert json.loads(flag_value(argv, "--default-chat-template-kwargs")) == {"enable_thinking": False}
    assert argv[-3:] == ["--enable-prefix-caching", "--max-num-seqs", "64"]


@pytest.mark.parametrize(
    "extra",
    [
        "--logprobs-mode raw_logprobs",
        "--logprobs-mode=raw_logprobs",
        "--no-return-tokens-as-token-ids",
        "--return_tokens_as_token_ids",
        "--weight-transfer-config {}",
        "--no-enable-auto-tool-choice",
    ],
)
def test_extra_args_cannot_override_a_required_flag(extra):
    with pytest.raises(EnvError, match="overrides a flag the training path requires"):
        build_command({**BASE, "ENGINE_EXTRA_ARGS": extra})


@pytest.mark.parametrize("extra", ["--host 0.0.0.0", "--host=0.0.0.0", "--host ::"])
def test_extra_args_cannot_bind_all_interfaces(extra):
    with pytest.raises(EnvError, match="must listen on 127.0.0.1"):
        build_command({**BASE, "ENGINE_EXTRA_ARGS": extra})


@pytest.mark.parametrize(
    "extra,var",
    [
        ("--max-model-len 4096", "ENGINE_MAX_MODEL_LEN"),
        ("-tp 2", "ENGINE_TENSOR_PARALLEL_SIZE"),
        ("--tool-call-parser=llama3_json", "TOOL_CALL_PARSER"),
        ("--port 9000", "ENGINE_PORT"),
    ],
)
def test_extra_args_point_managed_flags_at_their_variable(extra, var):
    with pytest.raises(EnvError, match=f"set {var} in .env"):
        build_command({**BASE, "ENGINE_EXTRA_ARGS": extra})


@pytest.mark.parametrize(
    "env,match",
    [
        (
            {"ENGINE_HOST": "0.0.0.0"},
            "ENGINE_HOST='0.0.0.0' is not allowed: the engine is on the host network and must bind 127.0.0.1",
        ),
        ({"ENGINE_TENSOR_PARALLEL_SIZE": "two"}, "ENGINE_TENSOR_PARALLEL_SIZE='two' is not a whole number"),
        ({"ENGINE_TENSOR_PARALLEL_SIZE": "0"}, "ENGINE_TENSOR_PARALLEL_SIZE='0' is below 1"),
        ({"ENGINE_GPU_MEMORY_UTILIZATION": "85"}, r"ENGINE_GPU_MEMORY_UTILIZATION='85' is above 1: set .* in \(0, 1\]"),
        ({"ENGINE_GPU_MEMORY_UTILIZATION": "0"}, r"ENGINE_GPU_MEMORY_UTILIZATION=0 is not in \(0, 1\]"),
        ({"CHAT_TEMPLATE_KWARGS": "enable_thinking=false"}, "CHAT_TEMPLATE_KWARGS is not JSON"),
        ({"CHAT_TEMPLATE_KWARGS": "[1]"}, "must be a JSON object"),
        ({"ENGINE_EXTRA_ARGS": "--foo 'unterminated"}, "cannot be parsed"),
    ],
)
def test_bad_settings_fail_with_one_line_naming_the_setting(env, match):
    with pytest.raises(EnvError, match=match) as info:
        build_command({**BASE, **env})
    assert "\n" not in str(info.value)


def test_empty_model_and_parser_are_the_fields_defaults():
    """compose passes both through empty when unset: the engine serves the one default, as the trainer trains it."""
    argv = build_command({"MODEL": "", "TOOL_CALL_PARSER": ""})
    assert argv[2] == "Qwen/Qwen3-1.7B" and flag_value(argv, "--tool-call-parser") == "hermes"


def test_dev_mode_is_forced_on_for_trl_routes():
    env = build_environment({"VLLM_SERVER_DEV_MODE": "0", "HF_HOME": "/bucket/hf-home"})
    assert env["VLLM_SERVER_DEV_MODE"] == "1"
    assert env["HF_HOME"] == "/bucket/hf-home"


def test_the_printed_command_round_trips_through_a_shell():
    argv = build_command({**BASE, "CHAT_TEMPLATE_KWARGS": '{"enable_thinking": false}'})
    assert shlex.split(shlex.join(argv)) == argv


def test_the_launcher_refuses_with_one_line_and_never_execs(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    services = str(Path(__file__).resolve().parents[3] / "services")
    env = {
        **os.environ,
        **BASE,
        "ENGINE_EXTRA_ARGS": "--host 0.0.0.0",
        "PYTHONPATH": services,
        "PATH": str(tmp_path),
    }  # no vllm on PATH: a refused start must not get as far as exec
    result = subprocess.run([sys.executable, "-m", "engine"], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("engine: refusing to start:") and "127.0.0.1" in line


# --- the stop set (stack/serving/turn_end.py, engine/stops.py) -------------------------------------------------


def test_the_generation_config_the_launcher_wrote_is_passed_to_vllm():
    assert "--generation-config" not in build_command(BASE)
    argv = build_command(BASE, "/tmp/asyncgrpo-engine-generation-config")
    assert flag_value(argv, "--generation-config") == "/tmp/asyncgrpo-engine-generation-config"


@pytest.mark.parametrize("extra", ["--generation-config vllm", "--generation_config=/models/gc"])
def test_a_generation_config_of_ones_own_needs_turn_end_tokens_model(extra):
    with pytest.raises(EnvError) as err:
        build_command({**BASE, "ENGINE_EXTRA_ARGS": extra})
    assert str(err.value) == (
        "ENGINE_EXTRA_ARGS contains --generation-config, which the launcher sets to stop turns where the chat "
        "template ends them (TURN_END_TOKENS=auto); remove it, or set TURN_END_TOKENS=model to serve the model's "
        "own stop set with your --generation-config"
    )
    argv = build_command({**BASE, "ENGINE_EXTRA_ARGS": extra, "TURN_END_TOKENS": "model"})
    assert argv[-len(shlex.split(extra)) :] == shlex.split(extra)


def test_a_malformed_turn_end_setting_is_refused_before_anything_loads():
    with pytest.raises(EnvError, match=r"^TURN_END_TOKENS='<\|im_end\|>,' has an empty entry"):
        build_command({**BASE, "TURN_END_TOKENS": "<|im_end|>,"})


def test_extra_value_reads_flags_as_vllm_would():
    extra = shlex.split("--tokenizer t1 --trust-remote-code --revision=abc --tokenizer t2 --chat-template '{{ x }}'")
    assert extra_value(extra, "--tokenizer") == "t2"  # argparse keeps the last
    assert extra_value(extra, "--revision") == "abc"
    assert extra_value(extra, "--trust-remote-code") == ""
    assert extra_value(extra, "--chat-template") == "{{ x }}"
    assert extra_value(extra, "--hf-config-path") is None
