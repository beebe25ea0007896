"""The startup report says plainly when OpenEnv's engine probe could not prove processed logprobs."""

from env_server.checks import EngineStatus


def status(mode: str, level: str = "tokens") -> EngineStatus:
    return EngineStatus(
        url="http://127.0.0.1:8001/v1",
        reachable=True,
        model="Qwen/Qwen3-1.7B",
        capture_level=level,
        rollout_type="train" if level == "tokens" else "eval",
        logprobs_mode=mode,
    )


def test_a_proven_engine_shows_its_logprobs_mode_and_nothing_else():
    s = status("processed")
    assert s.line() == (
        "engine    http://127.0.0.1:8001/v1 model=Qwen/Qwen3-1.7B capture_level=tokens [TRAIN] logprobs=processed"
    )
    assert s.unproven_line() is None


def test_an_unknown_mode_is_said_plainly_with_where_the_verdict_is():
    s = status("unknown")
    assert s.line().endswith("[TRAIN] logprobs=unknown")
    line = s.unproven_line()
    assert line.strip().startswith("logprobs UNPROVEN by OpenEnv's probe")
    assert "docker compose ps engine" in line and "ENGINE_LOGPROBS_UNPROVEN_OK" in line


def test_below_tokens_the_mode_is_not_the_question():
    s = status("", level="logprobs")
    assert "logprobs=" not in s.line() and s.unproven_line() is None
