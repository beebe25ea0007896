"""scripts/status's words agree with its own table and with Docker's states (exact lines): a trainer that
finished is finished, an exited container has no health, a running trainer is never "not started", a done
but untimed step is said to be done, and an engine with nothing to do is idle."""

from __future__ import annotations

import pytest

from stack.facts import DEFAULT_PORTS
from stackstatus import figures, report
from stackstatus.verdict import verdict

TRUSTED = (True, "")
IDLE = {"running": 0.0, "waiting": 0.0, "kv_cache_usage": 0.0, "generation_tok_s": 10.0}
BUSY = {"running": 2.0, "waiting": 0.0, "kv_cache_usage": 0.125, "generation_tok_s": 31.5}


def container(state: str, exit_code: int | None = None, health: str | None = None, output: str = "") -> dict:
    """A row of report.containers(): Docker keeps an exited container's last health status and probe output."""
    return {"state": state, "exit_code": exit_code, "health": health, "last_health_output": output}


def test_a_trainer_that_exited_0_after_its_run_finished_is_finished_not_unhealthy():
    # Measured on the CPU form: `exited (exit 0) unhealthy` once the run's status file stopped moving.
    trainer = container("exited", 0, "unhealthy", "run status not rewritten for 31 s")
    assert report.service_lines("trainer", trainer, "finished") == ["  trainer       finished (exit 0)"]


def test_a_trainer_stopped_by_sigterm_also_exits_0_and_says_stopped():
    trainer = container("exited", 0, "healthy")
    assert report.service_lines("trainer", trainer, "stopped") == ["  trainer       stopped (exit 0)"]


def test_preflight_done_is_finished_a_long_running_service_that_exited_0_is_exited():
    assert report.service_lines("preflight", container("exited", 0), None) == ["  preflight     finished (exit 0)"]
    assert report.service_lines("env-server", container("exited", 0, "healthy"), None) == [
        "  env-server    exited (exit 0)"
    ]


def test_an_exited_container_keeps_no_stale_health_line():
    check = container("exited", 137, "unhealthy", "healthy: https://a.example verified 3 s ago")
    assert report.service_lines("tunnel-check", check, None) == ["  tunnel-check  exited (exit 137)"]


def test_a_running_unhealthy_service_says_why_under_its_row():
    engine = container("running", None, "unhealthy", "probe:\nno token ids in the reply")
    assert report.service_lines("engine", engine, None) == [
        "  engine        running           unhealthy",
        "                └ no token ids in the reply",
    ]
    assert report.service_lines("engine", container("running", None, "healthy"), None) == [
        "  engine        running           healthy"
    ]


def test_a_running_trainer_without_a_status_file_is_starting_never_not_started():
    assert verdict({"missing": "no run has written a status yet"}, BUSY, TRUSTED, 1, 0, trainer="running") == (
        "verdict: no step timed yet: trainer starting (no status file yet); "
        "engine 2 running, 0 waiting, KV cache 12%, 31.5 tok/s generated; 0 sandboxes in flight"
    )
    assert verdict({"missing": "no run has written a status yet"}, {}, TRUSTED, None, "?", trainer=None) == (
        "verdict: no step timed yet: trainer not started; engine metrics unavailable; ? sandboxes in flight"
    )


def test_a_done_step_without_timing_says_it_is_done():
    # What status.json holds after step 1: TRL logs no perf/step_s for the first step.
    after_step_1 = {"state": "training", "step": 1, "max_steps": 2, "step_s": None, "rollout_wait_s": 12.0}
    assert verdict(after_step_1, BUSY, TRUSTED, 1, 2) == (
        "verdict: step 1/2 done, not timed yet (a step is timed from the end of the one before); "
        "engine 2 running, 0 waiting, KV cache 12%, 31.5 tok/s generated; 2 sandboxes in flight"
    )


@pytest.mark.parametrize(
    ("figures_in", "line"),
    [
        (IDLE, "engine 0 running, 0 waiting, KV cache 0%, idle"),
        ({**IDLE, "waiting": 1.0}, "engine 0 running, 1 waiting, KV cache 0%, 10.0 tok/s generated"),
        ({**IDLE, "running": 1.0}, "engine 1 running, 0 waiting, KV cache 0%, 10.0 tok/s generated"),
        ({**IDLE, "waiting": None}, "engine 0 running, ? waiting, KV cache 0%, 10.0 tok/s generated"),
    ],
    ids=["idle", "waiting", "running", "waiting-unknown"],
)
def test_the_engine_line_reports_idle_not_the_probes_tokens(figures_in, line):
    assert figures.describe_engine(figures_in) == line


def test_collect_passes_the_trainer_containers_state_to_the_verdict(monkeypatch):
    """The wiring: a running trainer container with no status file reaches the verdict as running."""
    trainer = {**container("running", None, "starting"), "started_at": "", "bucket": "/b", "id": "x", "settings": {}}
    monkeypatch.setattr(report, "containers", lambda project: {"trainer": trainer})
    monkeypatch.setattr(
        report, "handoff", lambda project: {"state": "verified", "trusted": True, "url": "https://a.example"}
    )
    monkeypatch.setattr(report, "training", lambda bucket: {"bucket": bucket, "missing": "no status"})
    monkeypatch.setattr(report, "gpus", lambda: [])
    st = report.collect("proj")
    assert st["verdict"] == (
        "verdict: no step timed yet: trainer starting (no status file yet); engine metrics unavailable; "
        "? sandboxes in flight"
    )
    assert "\n  trainer       running           starting\n" in report.human(st)


def test_collect_reads_an_empty_port_setting_as_the_default(monkeypatch):
    """Compose passes an unset port as "" (the service's own default). A fresh clone without .env read the engine
    at `http://127.0.0.1:/v1/models` and the env server likewise, and called both unreachable while healthy."""
    running = {**container("running", None, "healthy"), "started_at": "", "bucket": None, "id": "x"}
    svc = {
        "engine": {**running, "settings": {"ENGINE_PORT": "", "CAPTURE_PORT": ""}},
        "env-server": {**running, "settings": {"ENV_SERVER_PORT": "", "ENGINE_PORT": ""}},
    }
    asked = {}

    def probe(name):
        return lambda port, **kw: asked.update({name: port}) or {}

    monkeypatch.setattr(report, "containers", lambda project: svc)
    monkeypatch.setattr(report, "handoff", lambda project: {"state": "no hand-off volume (stack never started)"})
    monkeypatch.setattr(report, "training", lambda bucket: {"bucket": bucket, "missing": "no status"})
    monkeypatch.setattr(report, "gpus", lambda: [])
    monkeypatch.setattr(report, "engine_proven", lambda cid: None)
    monkeypatch.setattr(report, "engine_template", lambda cid: "")
    monkeypatch.setattr(report, "engine_level", probe("engine"))
    monkeypatch.setattr(report, "engine_metrics", probe("metrics"))
    monkeypatch.setattr(report, "env_server", probe("env_server"))
    report.collect("proj")
    assert asked == {
        "engine": DEFAULT_PORTS["ENGINE_PORT"],
        "metrics": DEFAULT_PORTS["ENGINE_PORT"],
        "env_server": DEFAULT_PORTS["ENV_SERVER_PORT"],
    }


def test_status_says_which_chat_template_the_engine_serves_and_that_turns_chain(monkeypatch):
    """The launcher's line (stack/serving/served_template.py), read from the engine container, under the capture level."""
    line = "chat template: the model's chat template with history-keeps-reasoning (...); turns chain (...)"
    running = {**container("running", None, "healthy"), "started_at": "", "bucket": None, "id": "e1"}
    monkeypatch.setattr(report, "containers", lambda project: {"engine": {**running, "settings": {}}})
    monkeypatch.setattr(report, "handoff", lambda project: {"state": "no hand-off volume (stack never started)"})
    monkeypatch.setattr(report, "training", lambda bucket: {"bucket": bucket, "missing": "no status"})
    monkeypatch.setattr(report, "gpus", lambda: [])
    monkeypatch.setattr(report, "engine_proven", lambda cid: "")
    monkeypatch.setattr(report, "engine_template", lambda cid: line if cid == "e1" else "")
    monkeypatch.setattr(report, "engine_level", lambda port, **kw: {"capture_level": "tokens", "detail": "ok"})
    monkeypatch.setattr(report, "engine_metrics", lambda port: {})
    st = report.collect("proj")
    assert st["engine"]["template"] == line
    assert f"engine      capture level: tokens — ok\n            {line}\n" in report.human(st)
