"""The healthcheck's logprobs verdict over HTTP: the sampling it pins, and what it says when it still cannot
prove processed logprobs.

The engine here is a stdlib stand-in that answers like vLLM would for a model whose runner-up token stays
masked whatever the request asks (the real mock engine, with a generation config, is exercised in
tests/integration/mock_engine/test_probes.py)."""

import pytest
from engine_standin import MODEL, Engine

from engine import probe as healthcheck
from stack.serving import probe


@pytest.fixture
def engine_factory():
    made = []

    def make(gap):
        made.append(Engine(gap))
        return made[-1]

    yield make
    for e in made:
        e.close()


def test_the_temperature_probes_pin_sampling_that_truncates_nothing(engine_factory):
    engine = engine_factory(lambda t: 4.0 / t)
    assert probe.probe(engine.url).endswith("logprobs mode processed")
    gap_requests = [b for b in engine.bodies if not b.get("return_token_ids")]
    assert [b["temperature"] for b in gap_requests] == [1.0, 2.0]
    for body in gap_requests:
        assert (body["top_k"], body["top_p"], body["min_p"], body["repetition_penalty"]) == (0, 1.0, 0.0, 1.0)


def test_a_masked_runner_up_is_unhealthy_and_names_the_override(engine_factory):
    engine = engine_factory(lambda t: None)
    with pytest.raises(probe.Unhealthy) as err:
        probe.probe(engine.url)
    msg = str(err.value)
    assert msg.startswith(f"processed logprobs not proven for {MODEL}: the runner-up token is masked (logprob -9999")
    assert "--logprobs-mode processed_logprobs" in msg
    assert msg.endswith(f"accept this model with ENGINE_LOGPROBS_UNPROVEN_OK={MODEL} in .env")


def test_a_flat_distribution_is_unproven_too(engine_factory):
    engine = engine_factory(lambda t: 0.2 / t)
    with pytest.raises(probe.Unhealthy) as err:
        probe.probe(engine.url)
    assert "the top-two gap is 0.200 at temperature 1 (a flat distribution" in str(err.value)


def test_the_override_accepts_only_the_model_it_names(engine_factory):
    engine = engine_factory(lambda t: None)
    verdict = probe.probe(engine.url, accepted_for=MODEL)
    assert verdict.startswith("engine healthy:")
    assert verdict.endswith(
        f"logprobs mode UNPROVEN (the runner-up token is masked (logprob -9999: the distribution "
        f"was truncated) at temperature 1), accepted for this model by "
        f"ENGINE_LOGPROBS_UNPROVEN_OK={MODEL}"
    )
    with pytest.raises(probe.Unhealthy):
        probe.probe(engine.url, accepted_for="Qwen/Qwen3-8B")


def test_raw_logprobs_stay_unhealthy_even_with_the_override(engine_factory):
    engine = engine_factory(lambda t: 4.0)
    with pytest.raises(probe.Unhealthy) as err:
        probe.probe(engine.url, accepted_for=MODEL)
    assert "raw, pre-temperature" in str(err.value)


def test_a_gap_that_drifts_unmeasurable_after_proof_stays_healthy(engine_factory, tmp_path):
    """Training moves the weights and with them the gap; the mode is the engine's launch flag."""
    proven = tmp_path / "proven"
    measurable = {"now": True}
    engine = engine_factory(lambda t: 4.0 / t if measurable["now"] else None)
    assert probe.probe(engine.url, proven_file=proven).endswith("logprobs mode processed")
    measurable["now"] = False
    verdict = probe.probe(engine.url, proven_file=proven)
    assert "logprobs mode processed (proven earlier for this engine; unmeasurable now: the runner-up" in verdict
    proven.write_text("another/model")
    with pytest.raises(probe.Unhealthy):
        probe.probe(engine.url, proven_file=proven)


def test_the_healthcheck_reads_the_override_from_its_environment(engine_factory, monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(probe, "PROVEN_FILE", tmp_path / "proven")
    engine = engine_factory(lambda t: None)
    monkeypatch.setenv("ENGINE_LOGPROBS_UNPROVEN_OK", MODEL)
    assert healthcheck.main([engine.url]) == 0
    assert "logprobs mode UNPROVEN" in capsys.readouterr().out
    monkeypatch.setenv("ENGINE_LOGPROBS_UNPROVEN_OK", "")
    assert healthcheck.main([engine.url]) == 1
    assert capsys.readouterr().out.startswith("engine UNHEALTHY: processed logprobs not proven")
