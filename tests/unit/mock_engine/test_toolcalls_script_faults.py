"""Pure parts of the mock engine: tool-call parsing round-trips, the scripted mode, fault switches."""

import json

import pytest

from mock_engine import faults, script, toolcalls


def test_a_tool_call_parses_and_renders_back_to_the_generated_text():
    text = "Let me look." + toolcalls.format_call("bash", {"command": "ls -la /tmp"})
    parsed = toolcalls.parse(text, tools_offered=True)
    assert parsed.content == "Let me look."
    (call,) = parsed.tool_calls
    assert call["type"] == "function" and call["id"].startswith("chatcmpl-tool-")
    assert call["function"]["name"] == "bash"
    assert json.loads(call["function"]["arguments"]) == {"command": "ls -la /tmp"}
    assert toolcalls.render_assistant(parsed.content, parsed.tool_calls) == text


def test_content_is_none_when_the_turn_is_only_a_call():
    parsed = toolcalls.parse(toolcalls.format_call("bash", {"command": "pwd"}), tools_offered=True)
    assert parsed.content is None and len(parsed.tool_calls) == 1


@pytest.mark.parametrize(
    "text",
    [
        '<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call> trailing',
        '<tool_call>\n{"name": "bash", "arguments": not json}\n</tool_call>',
        '<tool_call>\n{"name":"bash","arguments":{"command":"ls"}}\n</tool_call>',
        '<tool_call>\n{"name": "bash", "arguments": ["ls"]}\n</tool_call>',
        "<tool_call>\nhalf a call",
    ],
)
def test_anything_that_would_not_round_trip_stays_content(text):
    parsed = toolcalls.parse(text, tools_offered=True)
    assert parsed.tool_calls == [] and parsed.content == text


def test_no_tools_offered_means_no_parsing():
    text = toolcalls.format_call("bash", {"command": "ls"})
    assert toolcalls.parse(text, tools_offered=False).tool_calls == []


def write_script(tmp_path, doc):
    path = tmp_path / "scripted-actions.json"
    path.write_text(json.dumps(doc))
    return path


def assistant(command):
    args = json.dumps({"command": command})
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c", "type": "function", "function": {"name": "bash", "arguments": args}}],
    }


def test_script_follows_actions_then_submits(tmp_path):
    entries = script.load(write_script(tmp_path, [{"match": "fix the bug", "actions": ["ls", "cat a.py"]}]))
    s = script.Script(entries, prob=1.0)
    convo = [{"role": "system", "content": "sys"}, {"role": "user", "content": "Please fix the bug in a.py"}]
    assert s.next_action(convo, seed=1) == "ls"
    convo += [assistant("ls"), {"role": "tool", "content": "a.py"}]
    assert s.next_action(convo, seed=2) == "cat a.py"
    convo += [assistant("cat a.py"), {"role": "tool", "content": "..."}]
    assert s.next_action(convo, seed=3) == script.SUBMIT_COMMAND == "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
    convo += [assistant(script.SUBMIT_COMMAND)]
    assert s.next_action(convo, seed=4) is None


def test_script_ignores_other_tasks_and_rollouts_that_left_it(tmp_path):
    s = script.Script(script.load(write_script(tmp_path, [{"match": "fix", "actions": ["ls"]}])), prob=1.0)
    assert s.next_action([{"role": "user", "content": "something else"}], seed=1) is None
    off = [
        {"role": "user", "content": "fix"},
        {"role": "assistant", "content": "rambling"},
        {"role": "user", "content": "format error"},
    ]
    assert s.next_action(off, seed=1) is None


def test_script_probability_is_per_rollout_and_seeded(tmp_path):
    s = script.Script(script.load(write_script(tmp_path, [{"match": "fix", "actions": ["ls"]}])), prob=0.5)
    convo = [{"role": "user", "content": "fix"}]
    decisions = [s.next_action(convo, seed=seed) for seed in range(40)]
    assert set(decisions) == {"ls", None}
    assert decisions == [s.next_action(convo, seed=seed) for seed in range(40)]
    assert script.Script(s.entries, prob=0.0).next_action(convo, seed=3) is None


@pytest.mark.parametrize(
    "doc,match",
    [
        ({"match": "x"}, "must be a JSON list"),
        ([{"match": "", "actions": ["ls"]}], "`match` must be a non-empty string"),
        ([{"match": "x", "actions": "ls"}], "`actions` must be a list"),
    ],
)
def test_bad_script_files_fail_with_one_line(tmp_path, doc, match):
    with pytest.raises(script.ScriptError, match=match):
        script.load(write_script(tmp_path, doc))


def test_missing_script_file_and_bad_probability(tmp_path):
    with pytest.raises(script.ScriptError, match="does not exist"):
        script.load(tmp_path / "nope.json")
    with pytest.raises(script.ScriptError, match="MOCK_SCRIPT_PROB"):
        script.parse_prob("1.5")
    assert script.parse_prob(None) == 0.5


def test_faults_parse_from_env_and_reject_unknown_names():
    f = faults.from_env(
        {"MOCK_FAULTS": "no_token_ids, raw_logprobs", "MOCK_ERROR_STATUS": "503", "MOCK_ERROR_RATE": "1"}
    )
    assert "no_token_ids" in f and "raw_logprobs" in f and "token_strings" not in f
    assert f.should_error()
    with pytest.raises(faults.FaultError, match="known faults: no_token_ids"):
        faults.parse("no_ids")
    with pytest.raises(faults.FaultError, match="5xx"):
        faults.parse([], error_status=404)
    assert not faults.parse([]).should_error()


def test_the_turn_end_fault_is_a_known_switch():
    assert "turn_end_other" in faults.parse("turn_end_other, fork")
    assert "<|endoftext|>" in faults.FAULTS["turn_end_other"]


def test_a_bad_stop_setting_stops_the_mock_before_it_loads_a_model(tmp_path):
    """The mock reads TURN_END_TOKENS as the engine launcher does, and refuses a malformed one in one line."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    services = str(Path(__file__).resolve().parents[3] / "services")
    env = {**os.environ, "PYTHONPATH": services, "TURN_END_TOKENS": ",", "MOCK_MODEL_DIR": str(tmp_path)}
    result = subprocess.run([sys.executable, "-m", "mock_engine"], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "mock_engine: TURN_END_TOKENS=',' has an empty entry: set TURN_END_TOKENS to auto, model, or a "
        "comma-separated list of tokens, e.g. <|im_end|>"
    )
