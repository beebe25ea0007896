"""An engine lost in a weight push after the first one is waited out and re-joined, not a crash (trainer/rejoin.py),
through the chain the trainer hands TRL (weights.chain: FirstSync(ServedVersion(Rejoin(backend)))).

The backend stands in for TRL 1.16.0's WeightTransferClient (or the mock's): it fails the way that client does, a
RuntimeError raised from requests' own error (a refused connection, or the read timeout WEIGHT_SYNC_TIMEOUT_S sets).
Sleeping is recorded, not done; the engine's /health is a list of answers."""

from __future__ import annotations

import json

import pytest
import requests

from trainer import config, weights
from trainer.rejoin import Rejoin, engine_lost

ENGINE = "http://127.0.0.1:8001"


def refused():
    try:
        raise requests.exceptions.ConnectionError("('Connection aborted.', RemoteDisconnected('closed'))")
    except requests.exceptions.ConnectionError as cause:
        raise RuntimeError(f"Weight sync to the vLLM server at {ENGINE} failed.") from cause


def timed_out():
    try:
        raise requests.exceptions.ReadTimeout("HTTPConnectionPool(host='127.0.0.1', port=8001): Read timed out.")
    except requests.exceptions.ReadTimeout as cause:
        raise RuntimeError(f"Weight sync to the vLLM server at {ENGINE} failed.") from cause


def http_500():
    raise RuntimeError("mock engine /mock/weights answered HTTP 500: CUDA out of memory")


class Backend:
    """The five methods; `fail[phase]` lists what each call of that phase raises (None: works)."""

    def __init__(self, **fail):
        self.calls: list[str] = []
        self.sent: list[list] = []
        self.fail = {k: list(v) for k, v in fail.items()}

    def _call(self, name):
        self.calls.append(name)
        todo = self.fail.get(name)
        if todo:
            raise_it = todo.pop(0)
            if raise_it:
                raise_it()

    def init_weight_transfer(self):
        self._call("init")

    def pause(self):
        self._call("pause")

    def send_weights(self, iterator):
        self.sent.append(list(iterator))
        self._call("send")

    def resume(self):
        self._call("resume")

    def destroy(self):
        self._call("destroy")


class Clock:
    def __init__(self):
        self.now, self.slept = 0.0, []

    def sleep(self, s):
        self.slept.append(s)
        self.now += s

    def __call__(self):
        return self.now


def push(wrapped, weights_now=("w", 1)):
    wrapped.pause()
    wrapped.send_weights(iter([weights_now]))
    wrapped.resume()


def make(tmp_path, backend, answers=(True,), stop=lambda: None):
    status = tmp_path / "status.json"
    status.write_text(json.dumps({"state": "training", "step": 7}))
    clock, said, states = Clock(), [], []
    answers = list(answers)

    def answer(url):
        assert url == ENGINE
        states.append(json.loads(status.read_text()).get("state"))
        return answers.pop(0) if len(answers) > 1 else answers[0]

    lost = Rejoin(
        backend,
        ENGINE,
        lambda: iter([("w", "now")]),
        run_name="run-1",
        timeout_s=300,
        answers=answer,
        stop_requested=stop,
        stop_error=lambda why: KeyboardInterrupt(why),
        status_path=str(status),
        say=said.append,
        sleep=clock.sleep,
        clock=clock,
    )
    return lost, status, clock, said, states


def test_an_engine_killed_mid_push_is_waited_for_and_rejoined(tmp_path):
    backend = Backend(send=[None, refused])  # the first push works; the second loses the engine
    lost, status, clock, said, states = make(tmp_path, backend, answers=[False, False, True])
    push(lost)
    push(lost)  # no exception: the run goes on
    assert backend.calls == [
        *("pause", "send", "resume"),
        *("pause", "send"),  # lost here
        *("init", "pause", "send"),  # a new group, the engine paused, every weight sent anew
        "resume",  # TRL's own resume of that push
    ]
    assert backend.sent[-1] == [("w", "now")]  # the weights held now, not the half-sent iterator
    assert clock.slept == [2.0, 4.0]  # waited while /health did not answer
    # status.json said so while it waited (read at each /health probe), and says training again after.
    assert states == ["training", "waiting-for-rollouts", "waiting-for-rollouts"]
    doc = json.loads(status.read_text())
    assert (doc["state"], doc["reason"], doc["step"]) == ("training", None, 7)
    assert said[0] == (
        f"trainer: the engine at {ENGINE} was lost while sending the weights in a weight push (ConnectionError: "
        "('Connection aborted.', RemoteDisconnected('closed'))). Waiting for it: compose does not restart the "
        "engine, so run `docker compose up -d engine`; once it answers, this run re-joins it, sends it the weights "
        "trained so far and goes on. To stop instead: `docker compose stop trainer` saves this step; RUN_NAME=run-1 "
        "resumes it."
    )
    assert said[1].startswith(f"trainer: the engine is gone, waiting (retry in 2s): engine {ENGINE} lost while ")
    assert said[-1] == (
        f"trainer: re-joined the engine at {ENGINE} after 6 s and sent it the current weights; training goes on"
    )
    assert lost.rejoins == 1


def test_a_timed_out_push_names_the_setting(tmp_path):
    backend = Backend(resume=[None, timed_out])
    lost, _status, _clock, said, _ = make(tmp_path, backend)
    push(lost)
    push(lost)
    assert "no answer within WEIGHT_SYNC_TIMEOUT_S=300 s" in said[0] and "while resuming the engine" in said[0]
    # Resuming is what failed: the re-join resumes the new engine itself.
    assert backend.calls[-5:] == ["resume", "init", "pause", "send", "resume"]


def test_a_failing_rejoin_is_waited_out_too(tmp_path):
    backend = Backend(pause=[None, refused], init=[refused])
    lost, _status, clock, said, _ = make(tmp_path, backend, answers=[True])
    push(lost)
    push(lost)
    assert backend.calls[3:] == ["pause", "init", "init", "pause", "send", "send", "resume"]
    assert clock.slept == [2.0]
    assert any("answers but re-joining it failed (ConnectionError" in line for line in said)


def test_what_is_not_a_lost_engine_is_raised_as_before(tmp_path):
    lost, *_ = make(tmp_path, Backend(send=[None, http_500]))
    push(lost)
    with pytest.raises(RuntimeError, match="HTTP 500: CUDA out of memory"):
        push(lost)


def test_the_first_push_is_never_waited_out(tmp_path):
    """A first push that fails is a transport to fix: FirstSync's one line, not a wait for ever."""
    lost, _status, clock, said, _ = make(tmp_path, Backend(send=[refused]))
    with pytest.raises(RuntimeError):
        push(lost)
    assert clock.slept == [] and said == []


def test_a_stop_signal_while_waiting_stops_at_the_step_just_finished(tmp_path):
    stops = [None, None, "SIGTERM"]
    lost, *_ = make(tmp_path, Backend(pause=[None, refused]), answers=[False], stop=lambda: stops.pop(0))
    push(lost)
    with pytest.raises(KeyboardInterrupt, match="SIGTERM while waiting for the engine"):
        push(lost)


def test_lost_means_a_transport_failure_anywhere_in_the_chain():
    for fail, lost in [(refused, True), (timed_out, True), (http_500, False)]:
        try:
            fail()
        except RuntimeError as exc:
            assert engine_lost(exc) is lost, fail.__name__
    assert engine_lost(ConnectionRefusedError(111, "refused"))


def test_the_chain_the_trainer_builds(tmp_path, monkeypatch):
    """weights.chain, as train.py calls it: the first push reported by FirstSync, a later lost engine re-joined
    inside it, and ServedVersion counting the new engine's versions from its own start."""
    s = config.from_env({"WEIGHT_SYNC_TIMEOUT_S": "120", "RUN_NAME": "run-2", "BUCKET_DIR": str(tmp_path)})
    assert s.weight_sync_timeout_s == 120
    backend = Backend(send=[None, refused])
    versions = iter([1, 1, 2])  # push 2 went to a restarted engine: its count starts again there

    wrapped, served = weights.chain(backend, lambda: iter([("w", "now")]), s, {})
    said = []
    wrapped.say = said.append
    lost = served.inner
    lost.answers = lambda url: True
    lost.stop_requested = lambda: None
    lost.say = said.append
    served.probe = lambda url: (next(versions), False)
    assert (lost.timeout_s, lost.run_name, lost.engine_url) == (120, "run-2", s.engine_url)

    wrapped.init_weight_transfer()
    push(wrapped)
    push(wrapped)  # the engine is lost in this push's send, and re-joined
    push(wrapped)
    assert lost.rejoins == 1
    assert served.metrics() == {"weights/engine_stale": 0.0, "weights/engine_version_lag": 0.0}
    assert any(line.startswith("trainer: first weight sync done") for line in said)
    assert any(line.startswith(f"trainer: the engine at {s.engine_url} was lost while sending") for line in said)


@pytest.mark.parametrize(
    ("value", "line"),
    [
        (
            "5",
            "WEIGHT_SYNC_TIMEOUT_S='5' is below 10: set it in 10-1800 seconds (a 2.8 GB push took 0.23 s; 300 notices "
            "a lost engine in 5 minutes) (default 300)",
        ),
        (
            "1000000000",
            "WEIGHT_SYNC_TIMEOUT_S='1000000000' is above 1800: set it in 10-1800 seconds (a 2.8 GB push took 0.23 s; "
            "300 notices a lost engine in 5 minutes) (default 300)",
        ),
    ],
)
def test_the_timeout_is_bounded(value, line):
    assert config.read({"WEIGHT_SYNC_TIMEOUT_S": value})[1] == [line]
    assert config.from_env({}).weight_sync_timeout_s == 300


def test_a_named_client_gets_the_timeout(monkeypatch):
    """The mock's backend (the registry names it) is built with the setting as its per-call timeout."""
    import stack.backends as backends

    built = []
    monkeypatch.setattr(backends, "load", lambda spec: lambda url, **kw: built.append((spec, url, kw)) or "client")
    assert weights.build("mock", ENGINE, 120) == "client"
    assert built == [("mock_engine.weight_client:MockWeightTransfer", ENGINE, {"timeout_s": 120})]
    assert weights.build("nccl", ENGINE, 120) is None  # TRL builds its own, with weight_sync_timeout
