"""The trainer's settings through the shared readers: stated defaults, and every bad value at once."""

from __future__ import annotations

import pytest

from stack.env import EnvError
from stack.readers import trainer as config


def test_defaults_are_stated_and_engine_url_is_the_root(tmp_path):
    s = config.from_env({"BUCKET_DIR": str(tmp_path)})
    assert (s.engine_url, s.llm_url) == ("http://127.0.0.1:8001", "http://127.0.0.1:8001/v1")
    assert s.agent_step_limit == 12 and s.weight_transfer == "nccl" and s.dtype == "float32"
    assert s.evaluation.pass_k == (1,) and s.evaluation.attempts == 1 and s.evaluation.concurrency == 4
    assert s.evaluation.baseline == f"{tmp_path}/evals/baseline/eval.json"
    assert s.hub.private is True and s.hub.push_checkpoints is False and s.hub.attempts == 5
    assert config.from_env({"WEIGHT_TRANSFER": "mock"}).dtype == "float32"
    assert s.max_staleness is None  # auto: trainer/rollouts/staleness.py derives it from the batch shape
    assert config.from_env({"MAX_STALENESS": "7"}).max_staleness == 7
    with pytest.raises(EnvError, match="MAX_STALENESS='-1'"):
        config.from_env({"MAX_STALENESS": "-1"})


def test_pass_at_k_needs_enough_attempts():
    s = config.from_env({"EVAL_PASS_K": "8,4", "EVAL_ATTEMPTS": "8", "HUB_PRIVATE": "0"})
    assert s.evaluation.pass_k == (1, 4, 8) and s.evaluation.attempts == 8 and s.hub.private is False


def test_every_bad_value_is_one_line_and_all_are_reported():
    with pytest.raises(EnvError) as info:
        config.from_env(
            {"EVAL_PASS_K": "1,4", "EVAL_ATTEMPTS": "2", "SANDBOX": "modal", "MAX_STEPS": "lots", "HUB_PRIVATE": "?"}
        )
    assert str(info.value).splitlines() == [
        "MAX_STEPS='lots' is not a whole number: set MAX_STEPS to an integer (default 200)",
        "SANDBOX='modal' is not allowed: set SANDBOX to one of: e2b (production, E2B's cloud), docker (local sandboxes on this host) (default e2b)",
        "EVAL_PASS_K=1,4 needs EVAL_ATTEMPTS >= 4 attempts per task (EVAL_ATTEMPTS=2): raise EVAL_ATTEMPTS or "
        "lower EVAL_PASS_K",
        "HUB_PRIVATE='?' is not a yes/no value: set HUB_PRIVATE to 1 or 0 (default 1)",
    ]


def test_a_bad_pass_k_list():
    with pytest.raises(EnvError) as info:
        config.from_env({"EVAL_PASS_K": "1,two"})
    assert (
        str(info.value) == "EVAL_PASS_K='1,two' is not a list of positive whole numbers: set it like 1,4,8 (default 1)"
    )
