"""The pick-answer family (datasets/pick-answer) and the facts its policy is built on.

The verifier is run for real (bash, with its /app and /logs paths moved into a temp folder); the policy
itself needs torch and is tested in the mock-engine image (tests/integration/pick_policy).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path

import pytest

from mock_engine import agent_turns, build_policy, policy_eval, toolcalls

ROOT = Path(__file__).resolve().parents[3]
FAMILY = ROOT / "datasets" / "pick-answer"


def _generator():
    spec = importlib.util.spec_from_file_location("pick_answer_generate", FAMILY / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tasks(split: str) -> list[Path]:
    return sorted(p for p in (FAMILY / split).iterdir() if p.is_dir())


def test_committed_tasks_are_what_the_generator_writes(capsys):
    assert _generator().main(["--check"]) == 0, capsys.readouterr().out


def test_split_sizes_and_disjoint_instructions():
    train = {(t / "instruction.md").read_text() for t in _tasks("train")}
    heldout = {(t / "instruction.md").read_text() for t in _tasks("heldout")}
    assert (len(_tasks("train")), len(_tasks("heldout"))) == (32, 24)
    assert (len(train), len(heldout)) == (32, 24)
    assert not train & heldout


def test_every_environment_is_the_starter_image_so_builds_are_cache_hits():
    starter = (ROOT / "datasets/starter/write-greeting/environment/Dockerfile").read_bytes()
    for split in ("train", "heldout"):
        for task in _tasks(split):
            assert (task / "environment" / "Dockerfile").read_bytes() == starter, task
            assert sorted(p.name for p in (task / "environment").iterdir()) == ["Dockerfile"], task


def _verify(task: Path, tmp_path: Path, answer: str | None) -> str:
    app, logs = tmp_path / "app", tmp_path / "logs"
    app.mkdir(exist_ok=True)
    (app / "answer.txt").unlink(missing_ok=True)
    if answer is not None:
        (app / "answer.txt").write_text(answer)
    script = (task / "tests" / "test.sh").read_text().replace("/app/", f"{app}/").replace("/logs/", f"{logs}/")
    subprocess.run(["bash", "-c", script], check=True, capture_output=True)
    return (logs / "verifier" / "reward.txt").read_text().strip()


@pytest.mark.parametrize("split", ["train", "heldout"])
def test_the_verifier_rewards_only_the_family_letter(split, tmp_path):
    task = _tasks(split)[3]
    got = {a: _verify(task, tmp_path, a) for a in ("A", "B", "C", "D", "C\n", " C ", "CC", "c", "")}
    assert got == {"A": "0", "B": "0", "C": "1", "D": "0", "C\n": "1", " C ": "1", "CC": "0", "c": "0", "": "0"}
    assert _verify(task, tmp_path, None) == "0"


def test_the_reference_solution_passes(tmp_path):
    task = _tasks("heldout")[0]
    app = tmp_path / "app"
    app.mkdir()
    solve = (task / "solution" / "solve.sh").read_text().replace("/app/", f"{app}/")
    subprocess.run(["bash", "-c", solve], check=True)
    assert _verify.__name__ and (app / "answer.txt").read_text() == "C"


def test_policy_facts_agree_with_the_family():
    gen = _generator()
    assert build_policy.LETTERS == gen.LETTERS
    assert policy_eval.REWARDED == gen.REWARDED
    assert build_policy.ANSWER_FILE == gen.ANSWER_FILE
    assert build_policy.answer_command(gen.REWARDED).startswith(f"printf {gen.REWARDED} > {gen.ANSWER_FILE} && ")


def test_the_single_action_writes_the_letter_and_ends_the_run(tmp_path):
    """One command answers and submits: run for real, its output's first line is mini-swe-agent
    2.4.6's marker with return code 0 (what its environments' `_check_finished` ends the run on), and
    the verifier then reads the letter it wrote."""
    task = _tasks("heldout")[0]
    app = tmp_path / "app"
    app.mkdir()
    command = build_policy.answer_command("C").replace("/app/", f"{app}/")
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True)
    assert (done.returncode, done.stdout.lstrip().splitlines()[0].strip()) == (
        0,
        "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT",
    )
    assert (app / "answer.txt").read_text() == "C"
    assert _verify(task, tmp_path, "C") == "1"


def test_the_letter_comes_first_in_the_action():
    """The letter is the command's eighth character, so every later token of the action is format the
    policy can be sure of, and the letter is the only choice the rollout makes."""
    for letter in build_policy.LETTERS:
        command = build_policy.answer_command(letter)
        assert command.index(letter) == len("printf ")
        assert command == f"printf {letter} > /app/answer.txt && echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


def test_policy_eval_reads_the_letter_of_exactly_the_action():
    for letter in build_policy.LETTERS:
        assert policy_eval._ANSWER.fullmatch(build_policy.answer_command(letter)).group(1) == letter
    assert policy_eval._ANSWER.fullmatch("printf C > /app/answer.txt") is None
    assert policy_eval._ANSWER.fullmatch(agent_turns.SUBMIT) is None


def test_the_policy_turn_parses_as_a_tool_call_that_renders_back_exactly():
    command = build_policy.answer_command("B")
    text = toolcalls.format_call("bash", {"command": command})
    parsed = toolcalls.parse(text, tools_offered=True)
    assert json.loads(parsed.tool_calls[0]["function"]["arguments"]) == {"command": command}
    assert toolcalls.render_assistant(parsed.content, parsed.tool_calls) == text


def test_the_observation_of_a_silent_command_is_mini_swe_agents():
    assert agent_turns.observation("", 0, "x")["content"] == '{\n  "returncode": 0,\n  "output": ""\n}'
