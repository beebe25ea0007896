"""scripts/status judges the engine with the same inputs as the engine's own healthcheck: the model accepted
by ENGINE_LOGPROBS_UNPROVEN_OK in the engine container's settings and the model the healthcheck already
proved. Without them status called an engine `below tokens` that compose reported healthy.

The engine is a stdlib stand-in whose runner-up token stays masked whatever the request asks, so
processed logprobs cannot be proven (tests/unit/engine/test_probe_unproven.py grades the probe itself)."""

from __future__ import annotations

import pytest
from engine_standin import MODEL, Engine

from stackstatus import report


@pytest.fixture
def port():
    engine = Engine(lambda temperature: None)  # the runner-up stays masked at every temperature
    yield engine.url.rsplit(":", 1)[1]
    engine.close()


def test_unproven_logprobs_are_below_tokens_unless_the_engine_accepted_or_proved_the_model(port):
    status = report
    refused = status.engine_level(port)
    assert refused["capture_level"] == "below tokens"
    assert f"ENGINE_LOGPROBS_UNPROVEN_OK={MODEL}" in refused["detail"]
    accepted = status.engine_level(port, accepted_for=MODEL)
    assert accepted["capture_level"] == "tokens"
    assert accepted["detail"].endswith(f"accepted for this model by ENGINE_LOGPROBS_UNPROVEN_OK={MODEL}")
    # Accepted for another model is not accepted for this one (the healthcheck's own rule).
    assert status.engine_level(port, accepted_for="other/model")["capture_level"] == "below tokens"
    proven = status.engine_level(port, proven=MODEL)
    assert proven["capture_level"] == "tokens" and "proven earlier for this engine" in proven["detail"]


def test_status_reads_only_ports_and_the_accepted_model_from_a_containers_settings():
    status = report
    env = ["ENGINE_PORT=18000", "HF_TOKEN=hf_secret", f"ENGINE_LOGPROBS_UNPROVEN_OK={MODEL}", "WANDB_API_KEY=k"]
    assert status._shared_env(env) == {"ENGINE_PORT": "18000", "ENGINE_LOGPROBS_UNPROVEN_OK": MODEL}
