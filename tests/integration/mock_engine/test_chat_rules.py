"""Turns that chain, with the real parts of the images: transformers' own apply_chat_template, the mock's real
tokenizer and app, and the production launcher (`python -m engine`) on the tiny model given Qwen3's thinking
rules (mock_engine/tokenizer.py QWEN3_RULES_TEMPLATE). Needs transformers (the mock-engine image):
    tests/run-in-image mock-engine tests/integration/mock_engine/test_chat_rules.py
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import requests
from conftest import serve
from test_engine_launcher import argv_of, launch

from mock_engine import agent_turns
from mock_engine.tokenizer import QWEN3_RULES_TEMPLATE

CALL = '<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call>'


# Every engine here gets its own TMPDIR: an engine writes its healthcheck records (turn end, chain) into its temporary
# folder, one engine per container in production, and the session's engine (conftest) shares this container's /tmp:
# a Qwen3-rules engine started here overwrote them, and test_probes' healthcheck then reported Qwen3 rules for it.


def qwen3_model(model_dir: Path, tmp_path: Path) -> Path:
    """A copy of the tiny model whose own chat template has Qwen3's thinking rules."""
    model = tmp_path / "qwen3-rules-model"
    shutil.copytree(model_dir, model)
    code = (
        "import sys\nfrom transformers import AutoTokenizer\n"
        "t = AutoTokenizer.from_pretrained(sys.argv[1])\nt.chat_template = sys.argv[2]\nt.save_pretrained(sys.argv[1])\n"
    )
    subprocess.run([sys.executable, "-c", code, str(model), QWEN3_RULES_TEMPLATE], check=True)
    return model


def test_the_launcher_serves_the_derived_template_and_says_turns_chain(model_dir, tmp_path):
    result, tmp = launch(qwen3_model(model_dir, tmp_path), tmp_path)
    assert result.returncode == 0, result.stderr
    argv = argv_of(result)
    served = Path(argv[argv.index("--chat-template") + 1])
    assert served == tmp / "asyncgrpo-engine-chat-template.jinja" and "loop.index0 > -1" in served.read_text()
    assert "engine: chat template: the model's chat template with history-keeps-reasoning" in result.stdout
    assert "; turns chain (TOOL_CALL_PARSER=hermes" in result.stdout
    assert "turns chain" in (tmp / "asyncgrpo-engine-chain").read_text()  # what the healthcheck appends


def test_the_launcher_refuses_the_published_rules_in_one_line(model_dir, tmp_path):
    result, _ = launch(qwen3_model(model_dir, tmp_path), tmp_path, CHAT_TEMPLATE_FIX="off")
    assert result.returncode == 2 and "VLLM-ARGV" not in result.stdout
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("engine: refusing to start: turns FORK (TOOL_CALL_PARSER=hermes")
    assert "the template adds its own separator before a call" in line and "TURN_CHAIN_CHECK=warn" in line


def test_warn_serves_it_with_the_line(model_dir, tmp_path):
    result, _ = launch(qwen3_model(model_dir, tmp_path), tmp_path, CHAT_TEMPLATE_FIX="off", TURN_CHAIN_CHECK="warn")
    assert result.returncode == 0 and "--chat-template" not in argv_of(result)
    assert "; turns FORK (" in result.stdout


def test_the_mock_under_qwen3_rules_renders_history_as_the_derived_template(model_dir, tmp_path):
    history = [
        *agent_turns.first_messages("Fix it.", ("Linux", "6.1", "#1", "x86_64")),
        {
            "role": "assistant",
            "content": "Let me look.\n",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}
            ],
        },
        agent_turns.observation("a\n", 0, "c1"),
    ]
    with serve(model_dir, tmp_path, MOCK_CHAT_RULES="qwen3", TMPDIR=str(tmp_path)) as base:
        ids = requests.post(f"{base}/tokenize", json={"messages": history, "tools": [agent_turns.BASH_TOOL]}).json()
        text = requests.post(f"{base}/detokenize", json={"tokens": ids["tokens"]}).json()["prompt"]
    assert "<|im_start|>assistant\nLet me look.\n" + CALL + "<|im_end|>" in text  # no second newline
    assert "qwen3 rules; chat template: the model's chat template with history-keeps-reasoning" in (
        (tmp_path / "engine.log").read_text()
    )


def test_the_mock_refuses_the_published_qwen3_rules(model_dir, tmp_path):
    env = {"MOCK_CHAT_RULES": "qwen3", "CHAT_TEMPLATE_FIX": "off", "TMPDIR": str(tmp_path)}
    try:
        with serve(model_dir, tmp_path, **env):
            raise AssertionError("the mock engine started with a template whose turns fork")
    except AssertionError as exc:
        assert "mock_engine: refusing to start: turns FORK (" in str(exc), str(exc)


def test_scripted_turns_chain_through_the_mock_under_qwen3_rules(model_dir, tmp_path):
    """Two scripted turns as mini-swe-agent sends them back: turn 2's prompt ids extend turn 1's prompt and sampled
    ids, and the script still reads the history the agent holds (on script: turn 2 is its second action)."""
    from mock_engine_support import SCRIPT_ACTIONS, SCRIPT_MATCH, SERVED

    messages = agent_turns.first_messages(f"Solve {SCRIPT_MATCH}.", ("Linux", "6.1", "#1", "x86_64"))
    body = {"model": SERVED, "tools": [agent_turns.BASH_TOOL], "return_token_ids": True, "temperature": 1.0}
    with serve(model_dir, tmp_path, MOCK_CHAT_RULES="qwen3", MOCK_SCRIPT_PROB="1", TMPDIR=str(tmp_path)) as base:
        first = requests.post(f"{base}/v1/chat/completions", json={**body, "messages": messages}, timeout=60).json()
        message = first["choices"][0]["message"]
        call = message["tool_calls"][0]
        assert json.loads(call["function"]["arguments"]) == {"command": SCRIPT_ACTIONS[0]}
        history = [*messages, message, agent_turns.observation("a\n", 0, call["id"])]
        second = requests.post(f"{base}/v1/chat/completions", json={**body, "messages": history}, timeout=60).json()
    turn1 = first["prompt_token_ids"] + first["choices"][0]["token_ids"]
    assert second["prompt_token_ids"][: len(turn1)] == turn1
    call2 = second["choices"][0]["message"]["tool_calls"][0]
    assert json.loads(call2["function"]["arguments"]) == {"command": SCRIPT_ACTIONS[1]}
