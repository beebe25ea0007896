"""The learnable policy (/app/models/pick-policy): its own samples are valid agent actions with an even
choice, and the mock engine serving it, with nothing scripted, passes both engine probes.

Runs in the mock-engine image (tests/run-in-image mock-engine tests/integration/mock_engine); builds the
policy into a temp folder when the image predates it (minutes on 2 cores).
Bounds come from measured samples (see the report in each assertion and `python -m mock_engine.policy_eval`).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import requests
from conftest import serve
from mock_engine_support import SERVED
from openenv.core.harness.capture.validate_llm import validate_llm

from mock_engine.build_policy import LETTERS, read_tasks
from mock_engine.policy_eval import REWARDED, probe_gaps, rollout, sample_tasks, summarize

IMAGE_POLICY = Path("/app/models/pick-policy")
REPO = Path(__file__).resolve().parents[3]
HELDOUT = REPO / "datasets" / "pick-answer" / "heldout"
N = 48


@pytest.fixture(scope="module")
def policy_dir(tmp_path_factory) -> Path:
    if (IMAGE_POLICY / "config.json").exists():
        return IMAGE_POLICY
    out = tmp_path_factory.mktemp("policy") / "pick-policy"
    train = REPO / "datasets" / "pick-answer" / "train"
    subprocess.run([sys.executable, "-m", "mock_engine.build_policy", str(out), "--tasks", str(train)], check=True)
    return out


@pytest.fixture(scope="module")
def lm(policy_dir):
    import torch

    from mock_engine.lm import TinyLM

    torch.set_num_threads(2)
    return TinyLM(str(policy_dir), 32768, 256)


@pytest.fixture(scope="module")
def heldout(lm) -> dict:
    tasks = read_tasks(HELDOUT)
    return summarize([rollout(lm, t, u, s) for t, u, s in sample_tasks(tasks, N, seed=11)])


def test_its_own_samples_are_valid_two_turn_actions(heldout):
    # Measured on the held-out split at T=1.0 (policy_eval): 17/24 valid, 0 forked (13/24 with half the
    # full-prompt steps); the untrained family model (tiny-agent) writes no valid call at all. The bound catches a builder that
    # stops producing tool calls, not a small drift; raising it needs a better-converged build first.
    assert heldout["valid"] >= 0.3, heldout
    assert heldout["forked"] == 0, heldout


def test_it_chooses_among_the_letters_and_the_family_letter_is_not_settled(heldout):
    # Measured (n=24): A 0.33, B 0.13, C 0.21, D 0.17 (C 0.31-0.50 with half the full-prompt steps).
    # The gate needs room above the base rate, so the rewarded letter must stay well below 1 untrained.
    assert sum(heldout["letter_rate"][x] > 0 for x in LETTERS) >= 3, heldout
    assert 0.05 <= heldout["pass"] <= 0.6, (REWARDED, heldout)


def test_the_engine_probe_gap_is_measurable_and_scales_with_temperature(lm):
    g1, g2 = probe_gaps(lm)
    assert g1 >= 0.5 and abs(g2 / g1 - 0.5) < 0.01, (g1, g2)


@pytest.fixture(scope="module")
def policy_engine(tmp_path_factory, policy_dir):
    """The mock engine serving the policy as the learning gate runs it: no script file, nothing scripted,
    and room for a whole turn (the shared fixture's 48-token cap cuts the policy's ~100-token calls)."""
    with serve(
        policy_dir,
        tmp_path_factory.mktemp("policy-engine"),
        MOCK_SCRIPT_FILE="",
        MOCK_SCRIPT_PROB="0",
        MOCK_MAX_NEW_TOKENS="256",
    ) as base:
        yield base


def test_openenv_grades_the_policy_engine_trainable_with_tool_calls(policy_engine):
    report = validate_llm(policy_engine, SERVED)
    assert report.capture_level == "tokens", report.findings
    assert report.logprobs_mode == "processed", report.findings
    assert report.tool_support == "ok", report.findings


def test_our_healthcheck_proves_processed_logprobs_on_the_policy(policy_engine):
    result = subprocess.run(
        [sys.executable, "-m", "engine.probe", policy_engine],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().endswith("logprobs mode processed"), result.stdout


def test_a_served_turn_is_the_policys_own_tool_call(policy_engine):
    """Through the HTTP surface, nothing scripted: the reply is a parsed bash call the agent accepts."""
    from mock_engine import agent_turns

    body = {
        "model": SERVED,
        "messages": agent_turns.first_messages(
            read_tasks(HELDOUT)[0], ("Linux", "6.8.0-1-generic", "#1 SMP", "x86_64")
        ),
        "tools": [agent_turns.BASH_TOOL],
        "temperature": 1.0,
        "logprobs": True,
        "return_token_ids": True,
        "seed": 3,
    }
    choice = requests.post(f"{policy_engine}/v1/chat/completions", json=body, timeout=120).json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls", choice
    (call,) = choice["message"]["tool_calls"]
    assert call["function"]["name"] == "bash" and '"printf ' in call["function"]["arguments"], call
    assert len(choice["logprobs"]["content"]) == len(choice["token_ids"])
