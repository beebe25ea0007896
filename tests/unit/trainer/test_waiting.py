"""The trainer waits while the env server refuses rollouts (or is unreachable), says why in status.json,
and never retries a rollout that started. The runner is the real EnvServerRunner; only its one call to
the env server is replaced (no env server in the host venv), and sleeping is recorded, not done."""

import json

from openenv.harbor.models import HarborRolloutResult

from trainer.rollouts import waiting
from trainer.rollouts.factory import EnvServerRunner, TaskRef

REFUSED = HarborRolloutResult(
    ok=False,
    error="tunnel not verified yet (withdrawn: x): no public URL for the capture proxy, so a sandbox could not "
    "reach it; rollout not started. Wait for tunnel-check to verify the URL",
)
STARTED_AND_FAILED = HarborRolloutResult(ok=False, error="sandbox build failed", exception_type="BuildError")
GOOD = HarborRolloutResult(ok=True, reward=1.0)


class Clock:
    def __init__(self):
        self.now = 0.0
        self.slept = []

    def sleep(self, s):
        self.slept.append(s)
        self.now += s

    def __call__(self):
        return self.now


def runner(tmp_path, answers, monkeypatch, clock, reachability=None):
    reachability = list(reachability or [])
    status = tmp_path / "status.json"
    status.write_text(json.dumps({"state": "training", "step": 3}))
    r = EnvServerRunner("http://127.0.0.1:1", "mini-swe-agent", "docker", "http://e/v1", "m", 4, 60.0, "", str(status))
    calls = []

    def once(self, ref, sampling):
        # What status.json says at each attempt (while waiting: the previous attempt's reason).
        calls.append(json.loads(status.read_text()))
        answer = answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    monkeypatch.setattr(EnvServerRunner, "_run_once", once)
    monkeypatch.setattr(EnvServerRunner, "_unreachable", lambda self: reachability.pop(0) if reachability else "")
    real = waiting.Backoff.__init__

    def init(self, status_path=""):
        real(self, status_path, sleep=clock.sleep, clock=clock, log=lambda *a, **k: None)

    monkeypatch.setattr(waiting.Backoff, "__init__", init)
    return r, status, calls


def test_refusals_and_an_unreachable_server_are_waited_out_with_the_reason_in_status(tmp_path, monkeypatch):
    clock = Clock()
    answers = [REFUSED, ConnectionError("Failed to connect to ws://127.0.0.1:1/ws"), REFUSED, REFUSED, GOOD]
    r, status, calls = runner(tmp_path, answers, monkeypatch, clock)
    result = r.run(TaskRef("s", 0), None, "e1")
    assert result is GOOD
    assert clock.slept == [2.0, 4.0, 8.0, 16.0]  # doubling from 2 s (capped at 30 s)
    # The second attempt saw the first refusal recorded; the third the unreachable server.
    assert calls[1]["state"] == "waiting-for-rollouts" and "rollout not started" in calls[1]["reason"]
    assert calls[2]["reason"].startswith(
        "env server http://127.0.0.1:1 unreachable (ConnectionError: Failed to connect"
    )
    assert calls[4]["waiting_since_s"] == 14.0
    doc = json.loads(status.read_text())
    assert (doc["state"], doc["reason"], doc["step"]) == ("training", None, 3)


def test_a_rollout_that_started_and_failed_is_not_retried(tmp_path, monkeypatch):
    clock = Clock()
    r, status, calls = runner(tmp_path, [STARTED_AND_FAILED, GOOD], monkeypatch, clock)
    assert r.run(TaskRef("s", 0), None, "e1") is STARTED_AND_FAILED
    assert clock.slept == [] and len(calls) == 1
    assert json.loads(status.read_text())["state"] == "training"


def test_the_backoff_is_capped_and_never_overwrites_an_ended_run(tmp_path):
    clock = Clock()
    status = tmp_path / "status.json"
    status.write_text(json.dumps({"state": "stopped"}))
    b = waiting.Backoff(str(status), sleep=clock.sleep, clock=clock, log=lambda *a, **k: None)
    for _ in range(7):
        b.wait("refused")
    assert clock.slept == [2, 4, 8, 16, 30, 30, 30]
    assert json.loads(status.read_text()) == {"state": "stopped"}


def test_an_env_server_that_does_not_answer_http_is_waited_for_before_any_rollout(tmp_path, monkeypatch):
    clock = Clock()
    r, status, calls = runner(
        tmp_path, [GOOD], monkeypatch, clock, reachability=["ConnectError: All connection attempts failed", ""]
    )
    assert r.run(TaskRef("s", 0), None, "e1") is GOOD
    assert clock.slept == [2.0] and len(calls) == 1  # no rollout was attempted while it was down
    assert calls[0]["state"] == "waiting-for-rollouts"
    assert "unreachable (ConnectError: All connection attempts failed)" in calls[0]["reason"]


def test_unreachable_is_measured_over_http(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens once closed
    r = EnvServerRunner(f"http://127.0.0.1:{port}", "h", "docker", "http://e/v1", "m", 4, 60.0)
    assert r._unreachable().startswith("ConnectError")


def test_a_connection_lost_mid_rollout_is_waited_out_and_the_rollout_runs_again(tmp_path, monkeypatch):
    """websockets' ConnectionClosedError (the env server killed mid-rollout, as in the warm-up) used to
    escape the runner and kill the trainer; tests/integration/trainer_waits kills a real server."""
    from websockets.exceptions import ConnectionClosedError

    clock = Clock()
    answers = [ConnectionClosedError(None, None), OSError(113, "No route to host"), GOOD]
    r, status, calls = runner(tmp_path, answers, monkeypatch, clock)
    assert r.run(TaskRef("s", 0), None, "e1") is GOOD
    assert clock.slept == [2.0, 4.0] and len(calls) == 3
    assert calls[1]["reason"] == (
        "connection to the env server http://127.0.0.1:1 lost during the rollout (ConnectionClosedError: no close "
        "frame received or sent); it runs again once the env server answers"
    )
    assert calls[2]["reason"] == "env server http://127.0.0.1:1 unreachable (OSError: [Errno 113] No route to host)"
    assert json.loads(status.read_text())["state"] == "training"


def test_a_rollout_past_its_deadline_is_not_waited_out(tmp_path, monkeypatch):
    import pytest

    clock = Clock()
    r, _, calls = runner(tmp_path, [TimeoutError("message timeout"), GOOD], monkeypatch, clock)
    with pytest.raises(TimeoutError):
        r.run(TaskRef("s", 0), None, "e1")
    assert clock.slept == [] and len(calls) == 1
