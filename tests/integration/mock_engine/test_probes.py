"""OpenEnv's own engine probe and our healthcheck, against the real mock engine with faults on and off."""

import os
import subprocess
import sys

import pytest
import requests
from mock_engine_support import SERVED, set_faults
from openenv.core.harness.capture.validate_llm import validate_llm


def test_openenv_grades_the_mock_trainable(engine):
    report = validate_llm(engine, SERVED)
    assert report.capture_level == "tokens", report.findings
    assert report.logprobs_mode == "processed"
    assert report.n_prompt_ids > 0 and report.n_completion_ids > 0


@pytest.mark.parametrize("fault", ["no_token_ids", "no_prompt_token_ids", "logprobs_without_ids", "raw_logprobs"])
def test_openenv_grades_each_fault_below_tokens(engine, fault):
    set_faults(engine, active=[fault])
    report = validate_llm(engine, SERVED)
    assert report.reachable
    assert report.capture_level == "logprobs", (fault, report.capture_level, report.findings)
    assert not report.trainable
    if fault == "raw_logprobs":
        assert report.logprobs_mode == "raw"


def run_probe(engine, *args):
    port = engine.rsplit(":", 1)[1]
    env = {**os.environ, "ENGINE_HOST": "127.0.0.1", "ENGINE_PORT": port}
    return subprocess.run(
        [sys.executable, "-m", "engine.probe", *args], env=env, capture_output=True, text=True, timeout=120
    )


def test_healthcheck_passes_on_a_trainable_engine(engine):
    result = run_probe(engine)  # as compose runs it: no arguments, ENGINE_HOST/ENGINE_PORT
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("engine healthy:")
    # The mock's start-up lines on turn ends (stack/serving/turn_end.py) and on the served template and its chain check
    # (stack/serving/served_template.py), repeated by the healthcheck in that order: one line.
    assert (
        "; turn end <|im_end|> (2): the engine stops on it alone "
        "(TURN_END_TOKENS=auto); the model's generation config also stops on <|endoftext|> (0), which the chat "
        "template never renders at a turn's end (a turn ending there would fork its rollout); TURN_END_TOKENS=model "
        "keeps the model's stops; chatml rules; chat template: the model's chat template, as published (CHAT_TEMPLATE_FIX: "
        "no rewrite applies); "
    ) in result.stdout, result.stdout
    assert result.stdout.strip().endswith(
        "turns chain (TOOL_CALL_PARSER=hermes, REASONING_PARSER=(none), CHAT_TEMPLATE_KWARGS empty): 3 tool turns, "
        "with and without text before the call, extend the previous prompt token for token"
    ), result.stdout
    assert len(result.stdout.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "fault,flag",
    [
        ("no_token_ids", "--return-tokens-as-token-ids"),
        ("no_prompt_token_ids", "--return-tokens-as-token-ids"),
        ("token_strings", "--return-tokens-as-token-ids"),
        ("logprobs_without_ids", "--return-tokens-as-token-ids"),
        ("raw_logprobs", "--logprobs-mode processed_logprobs"),
    ],
)
def test_healthcheck_fails_naming_the_missing_flag(engine, fault, flag):
    set_faults(engine, active=[fault])
    result = run_probe(engine, engine)
    assert result.returncode == 1
    assert result.stdout.startswith("engine UNHEALTHY:")
    assert flag in result.stdout


def test_healthcheck_reports_an_erroring_engine(engine):
    set_faults(engine, active=[], error_status=503)
    result = run_probe(engine, engine)
    assert result.returncode == 1 and "HTTP 503" in result.stdout


# --- a generation config that truncates sampling (vLLM applies it to requests that leave it unset) ------


def _first_position(engine, **sampling) -> list[float]:
    body = {
        "model": SERVED,
        "messages": [{"role": "user", "content": "Reply with exactly: hello"}],
        "max_tokens": 1,
        "temperature": 1.0,
        "logprobs": True,
        "top_logprobs": 5,
        **sampling,
    }
    resp = requests.post(f"{engine}/v1/chat/completions", json=body, timeout=60)
    resp.raise_for_status()
    return [t["logprob"] for t in resp.json()["choices"][0]["logprobs"]["content"][0]["top_logprobs"]]


def test_the_mock_applies_the_generation_config_to_requests_that_leave_sampling_unset(engine_with_generation_config):
    unset = _first_position(engine_with_generation_config)
    assert unset[0] == 0.0 and all(v == -9999.0 for v in unset[1:]), unset
    pinned = _first_position(engine_with_generation_config, top_k=0, top_p=1.0, min_p=0.0)
    assert all(-100 < v < 0 for v in pinned), pinned


def test_openenvs_probe_cannot_tell_through_that_generation_config(engine_with_generation_config):
    """Why the healthcheck pins its own sampling: OpenEnv's probe leaves it unset and measures nothing."""
    report = validate_llm(engine_with_generation_config, SERVED)
    assert report.capture_level == "tokens" and report.logprobs_mode == "unknown"


def test_the_healthcheck_proves_processed_logprobs_through_that_generation_config(engine_with_generation_config):
    result = run_probe(engine_with_generation_config, engine_with_generation_config)
    assert result.returncode == 0, result.stdout + result.stderr
    # The verdict, then the turn-end line the healthcheck appends (stack/serving/turn_end.py).
    assert "; logprobs mode processed; turn end <|im_end|> (2): " in result.stdout, result.stdout


def test_raw_logprobs_still_fail_the_healthcheck_through_that_generation_config(engine_with_generation_config):
    set_faults(engine_with_generation_config, active=["raw_logprobs"])
    try:
        result = run_probe(engine_with_generation_config, engine_with_generation_config)
    finally:
        set_faults(engine_with_generation_config, active=[])
    assert result.returncode == 1, result.stdout
    assert "raw, pre-temperature" in result.stdout and "--logprobs-mode processed_logprobs" in result.stdout
