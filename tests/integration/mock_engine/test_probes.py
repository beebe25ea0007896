"""OpenEnv's own engine probe and our healthcheck, against the real mock engine with faults on and off."""

import os
import subprocess
import sys

import pytest
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
