"""The production engine's launcher (`python -m engine`) on the tiny model, with a stand-in `vllm` on PATH
that prints its arguments: the stop set it hands vLLM for each TURN_END_TOKENS (stack/serving/turn_end.py).

The tiny model is shaped like Qwen3 here: its generation config stops on <|im_end|> (2) and <|endoftext|> (0),
its chat template closes an assistant turn with <|im_end|>. Needs transformers (the mock-engine image):
    tests/run-in-image mock-engine tests/integration/mock_engine/test_engine_launcher.py
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SERVICES = str(Path(__file__).resolve().parents[3] / "services")


def launch(model_dir: Path, tmp_path: Path, **env: str) -> tuple[subprocess.CompletedProcess, Path]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / "vllm"
    fake.write_text('#!/bin/sh\necho "VLLM-ARGV $*"\n')
    fake.chmod(0o755)
    tmp = tmp_path / "tmp"
    tmp.mkdir(exist_ok=True)
    environment = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "PYTHONPATH": SERVICES,
        "HOME": str(tmp_path),
        "HF_HOME": str(tmp_path / "hf"),
        "HF_HUB_OFFLINE": "1",
        "TMPDIR": str(tmp),  # the record and the generation config go under the container's temp folder
        "MODEL": str(model_dir),
        **env,
    }
    result = subprocess.run(
        [sys.executable, "-m", "engine"], env=environment, capture_output=True, text=True, timeout=120
    )
    return result, tmp


def argv_of(result: subprocess.CompletedProcess) -> list[str]:
    (line,) = [x for x in result.stdout.splitlines() if x.startswith("VLLM-ARGV ")]
    return line.split()[1:]


def test_auto_hands_vllm_a_generation_config_that_stops_on_the_turn_end_alone(model_dir, tmp_path):
    result, tmp = launch(model_dir, tmp_path)
    assert result.returncode == 0, result.stderr
    argv = argv_of(result)
    folder = Path(argv[argv.index("--generation-config") + 1])
    assert folder == tmp / "asyncgrpo-engine-generation-config"
    written = json.loads((folder / "generation_config.json").read_text())
    model = json.loads((model_dir / "generation_config.json").read_text())
    assert (model["eos_token_id"], written["eos_token_id"]) == ([2, 0], 2)
    # Everything else is the model's own: the sampling defaults vLLM derives from it do not change.
    assert {k: v for k, v in written.items() if k != "eos_token_id"} == {
        k: v for k, v in model.items() if k != "eos_token_id"
    }
    line = (
        "turn end <|im_end|> (2): the engine stops on it alone (TURN_END_TOKENS=auto); the model's generation config "
        "also stops on <|endoftext|> (0), which the chat template never renders at a turn's end (a turn ending there "
        "would fork its rollout); TURN_END_TOKENS=model keeps the model's stops"
    )
    assert f"engine: {line}" in result.stdout.splitlines()
    assert (tmp / "asyncgrpo-engine-turn-end").read_text() == line + "\n"  # what the healthcheck repeats


def test_model_leaves_vllm_the_models_own_stops_and_says_they_disagree(model_dir, tmp_path):
    result, tmp = launch(model_dir, tmp_path, TURN_END_TOKENS="model")
    assert result.returncode == 0, result.stderr
    assert "--generation-config" not in argv_of(result)
    assert not (tmp / "asyncgrpo-engine-generation-config").exists()
    assert (
        (tmp / "asyncgrpo-engine-turn-end")
        .read_text()
        .startswith("turn ends DISAGREE: the engine stops on <|im_end|> (2), <|endoftext|> (0) (TURN_END_TOKENS=model)")
    )


def test_a_listed_token_the_model_lacks_refuses_the_start_in_one_line(model_dir, tmp_path):
    result, _ = launch(model_dir, tmp_path, TURN_END_TOKENS="<|eot_id|>")
    assert result.returncode == 2 and "VLLM-ARGV" not in result.stdout
    assert result.stderr.strip() == (
        "engine: refusing to start: TURN_END_TOKENS names '<|eot_id|>', which is not one token of this model's "
        "tokenizer: set TURN_END_TOKENS to auto, model, or a comma-separated list of tokens, e.g. <|im_end|>"
    )
