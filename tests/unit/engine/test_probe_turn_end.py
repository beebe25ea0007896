"""The healthcheck (`python -m engine.probe`) repeats the launcher's turn-end line (stack/serving/turn_end.py)
at the end of a healthy verdict: still ONE line, and a disagreement there is said, never made unhealthy."""

from engine_standin import Engine

from engine import probe as healthcheck
from stack.serving import probe, turn_end

DISAGREE = (
    "turn ends DISAGREE: the engine stops on <|im_end|> (151645), <|endoftext|> (151643) (TURN_END_TOKENS=model), "
    "but the chat template closes an assistant turn with <|im_end|> (151645) only: a turn ending on <|endoftext|> "
    "(151643) forks its rollout (the next prompt renders <|im_end|> (151645) in its place); set TURN_END_TOKENS=auto"
)


def test_a_healthy_verdict_ends_with_the_launchers_line(tmp_path):
    engine = Engine(lambda t: 4.0 / t)
    try:
        record = tmp_path / "turn-end"
        turn_end.write_record(DISAGREE, record)
        verdict = probe.probe(engine.url, turn_end_file=record)
        assert verdict.startswith("engine healthy:") and "\n" not in verdict
        assert verdict.endswith(f"; logprobs mode processed; {DISAGREE}")
        # No record (another host, an engine started without the launcher): nothing is said about turn ends.
        assert probe.probe(engine.url, turn_end_file=tmp_path / "none").endswith("logprobs mode processed")
        assert probe.probe(engine.url).endswith("logprobs mode processed")
    finally:
        engine.close()


def test_the_healthcheck_reads_the_record_the_launcher_writes(tmp_path, monkeypatch, capsys):
    from stack.serving import chain

    engine = Engine(lambda t: 4.0 / t)
    try:
        monkeypatch.setattr(turn_end, "RECORD", tmp_path / "turn-end")
        # No chain record: a launcher run on this host leaves one in the temporary folder, which this test read.
        monkeypatch.setattr(chain, "RECORD", tmp_path / "chain")
        monkeypatch.setattr(probe, "PROVEN_FILE", tmp_path / "proven")
        turn_end.write_record(DISAGREE)
        assert healthcheck.main([engine.url]) == 0
        (line,) = capsys.readouterr().out.splitlines()
        assert line.startswith("engine healthy:") and line.endswith(DISAGREE)
    finally:
        engine.close()


SERVED = (
    "chat template: the model's chat template with history-keeps-reasoning (CHAT_TEMPLATE_FIX=auto: ...); turns "
    "chain (TOOL_CALL_PARSER=hermes, REASONING_PARSER=(none), CHAT_TEMPLATE_KWARGS empty): 3 tool turns, ..."
)


def test_the_healthcheck_also_says_which_template_is_served_and_that_turns_chain(tmp_path, monkeypatch, capsys):
    """stack/serving/served_template.py's line (the launcher writes it to chain.RECORD) follows the turn-end line."""
    from stack.serving import chain

    engine = Engine(lambda t: 4.0 / t)
    try:
        monkeypatch.setattr(turn_end, "RECORD", tmp_path / "turn-end")
        monkeypatch.setattr(chain, "RECORD", tmp_path / "chain")
        monkeypatch.setattr(probe, "PROVEN_FILE", tmp_path / "proven")
        turn_end.write_record(DISAGREE)
        chain.write_record(SERVED)
        assert healthcheck.main([engine.url]) == 0
        (line,) = capsys.readouterr().out.splitlines()
        assert line.endswith(f"; logprobs mode processed; {DISAGREE}; {SERVED}")
    finally:
        engine.close()
