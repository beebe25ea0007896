"""A lost engine stops the run with a checkpoint and one line (trainer/watch/engine_gone.py). It is never waited for,
re-joined or hung on.

The backend stands in for TRL 1.16.0's WeightTransferClient (or the mock's), through the chain the trainer hands TRL
(weights.chain: FirstSync(ServedVersion(PushWatch(backend)))). It fails the way that client does: a RuntimeError
raised from requests' own error (a refused connection, or the read timeout WEIGHT_SYNC_TIMEOUT_S sets). Time is a
fake clock; /health is probed for real against small HTTP servers in this process."""

from __future__ import annotations

import faulthandler
import http.server
import json
import threading
from pathlib import Path

import pytest
import requests
from openenv.harbor.models import HarborRolloutResult

from stack.readers import trainer as config
from trainer.rollouts import waiting
from trainer.rollouts.factory import EnvServerRunner, TaskRef
from trainer.transfer import weights
from trainer.watch import engine_gone
from trainer.watch.engine_gone import EngineGone, HealthWatch, engine_lost
from trainer.watch.status import RunStatus

ENGINE = "http://127.0.0.1:8001"


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


CLOCK = Clock()


def refused():
    try:
        raise requests.exceptions.ConnectionError("('Connection aborted.', RemoteDisconnected('closed'))")
    except requests.exceptions.ConnectionError as cause:
        raise RuntimeError(f"Weight sync to the vLLM server at {ENGINE} failed.") from cause


def timed_out():
    CLOCK.now += 300.0  # the call waited out its timeout
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
        list(iterator)
        self._call("send")

    def resume(self):
        self._call("resume")

    def destroy(self):
        self._call("destroy")


def chain(tmp_path, backend, timeout="300"):
    s = config.from_env({"WEIGHT_SYNC_TIMEOUT_S": timeout, "RUN_NAME": "run-1", "BUCKET_DIR": str(tmp_path)})
    wrapped, served, watch = weights.chain(backend, s, {})
    wrapped.say = lambda line: None
    served.probe = lambda url: (None, None)
    watch.clock = CLOCK
    return wrapped, watch, s


def push(wrapped):
    wrapped.pause()
    wrapped.send_weights(iter([("w", 1)]))
    wrapped.resume()


# --- 1. a weight push --------------------------------------------------------------------------------------------
def test_an_engine_lost_in_a_later_push_raises_engine_gone_and_nothing_is_retried(tmp_path):
    backend = Backend(send=[None, refused])  # the first push works; the second loses the engine
    wrapped, watch, s = chain(tmp_path, backend)
    wrapped.init_weight_transfer()
    push(wrapped)
    with pytest.raises(EngineGone) as caught:
        push(wrapped)
    # No re-join, no second try, no resume of a dead engine: the exception leaves TRL's push at once.
    assert backend.calls == ["init", "pause", "send", "resume", "pause", "send"]
    assert caught.value is watch.gone
    assert caught.value.reason() == (
        f"the engine at {s.engine_url} is gone: sending it the weights failed after 0.0 s (ConnectionError: "
        "('Connection aborted.', RemoteDisconnected('closed')))"
    )
    assert isinstance(caught.value.__cause__, RuntimeError)
    wrapped.destroy()  # TRL's `finally` still gets its destroy
    assert backend.calls[-1] == "destroy"


def test_a_hung_engine_is_named_with_the_timeout_and_how_long_it_took(tmp_path):
    backend = Backend(pause=[None, timed_out])
    wrapped, _, s = chain(tmp_path, backend, timeout="300")
    push(wrapped)
    with pytest.raises(EngineGone) as caught:
        push(wrapped)
    assert caught.value.after_s == 300.0
    assert caught.value.reason() == (
        f"the engine at {s.engine_url} is gone: pausing it for a weight push failed after 300.0 s (ReadTimeout: "
        "HTTPConnectionPool(host='127.0.0.1', port=8001): Read timed out.; no answer within "
        "WEIGHT_SYNC_TIMEOUT_S=300 s)"
    )


def test_a_failed_resume_is_a_lost_engine_too(tmp_path):
    wrapped, _, _ = chain(tmp_path, Backend(resume=[None, refused]))
    push(wrapped)
    with pytest.raises(EngineGone, match="resuming it after a weight push failed after 0.0 s"):
        push(wrapped)


def test_what_is_not_a_lost_engine_is_raised_as_before(tmp_path):
    wrapped, _, _ = chain(tmp_path, Backend(send=[None, http_500]))
    push(wrapped)
    with pytest.raises(RuntimeError, match="HTTP 500: CUDA out of memory") as caught:
        push(wrapped)
    assert not isinstance(caught.value, EngineGone)


def test_the_first_push_failing_is_the_transport_line_not_engine_gone(tmp_path):
    """The cold sync at train begin is weights.FirstSync's: a failure there is a transport to fix (exit 1)."""
    wrapped, watch, _ = chain(tmp_path, Backend(send=[refused]))
    with pytest.raises(weights.FirstSyncFailed, match="the first weight sync to the engine failed while sending"):
        push(wrapped)
    assert watch.gone is None


def test_lost_means_a_transport_failure_anywhere_in_the_chain():
    for fail, lost in [(refused, True), (timed_out, True), (http_500, False)]:
        try:
            fail()
        except RuntimeError as exc:
            assert engine_lost(exc) is lost, fail.__name__
    assert engine_lost(ConnectionRefusedError(111, "refused"))


# --- 2. while rollouts are awaited -------------------------------------------------------------------------------
class Health(http.server.BaseHTTPRequestHandler):
    code = 200

    def do_GET(self):  # noqa: N802 - http.server's name
        self.send_response(self.code if self.path == "/health" else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def engine():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), type("H", (Health,), {}))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def test_the_probe_asks_the_engines_health(engine):
    url = f"http://127.0.0.1:{engine.server_address[1]}"
    assert engine_gone.probe(url) == ""
    engine.RequestHandlerClass.code = 503  # vLLM's answer once its engine core died
    assert engine_gone.probe(url) == "/health answered HTTP 503"
    port = engine.server_address[1]
    engine.shutdown()
    engine.server_close()
    assert engine_gone.probe(f"http://127.0.0.1:{port}").startswith("ConnectError: ")


def test_the_watch_stops_the_run_once_health_failed_for_gone_after_s_in_a_row():
    answers = iter(["", "ConnectError: refused", "ConnectError: refused", "", "ConnectError: refused", "x", "x"])
    clock = Clock()
    watch = HealthWatch(ENGINE, answer=lambda url: next(answers), clock=clock)
    assert engine_gone.GONE_AFTER_S == 30.0
    for now in (0.0, 5.0, 34.0, 40.0, 45.0, 74.9):  # the 200 at 40 s starts the count again
        clock.now = now
        watch.check()
    clock.now = 75.0
    with pytest.raises(EngineGone) as caught:
        watch.check()
    assert caught.value.after_s == 30.0
    assert caught.value.reason() == (
        f"the engine at {ENGINE} is gone: its /health has not answered for 30 s while the trainer waited for "
        "rollouts (x)"
    )


ENGINE_DOWN = HarborRolloutResult(
    ok=False,
    error=f"engine {ENGINE}/v1 is not reachable (ConnectError: refused); rollout not started. Check `docker "
    "compose ps engine` and ENGINE_URL",
)
GOOD = HarborRolloutResult(ok=True, reward=1.0)
BACKOFF = waiting.Backoff.__init__


def runner(monkeypatch, answers, slept):
    monkeypatch.setattr(EnvServerRunner, "_run_once", lambda self, ref, sampling: answers.pop(0))
    monkeypatch.setattr(EnvServerRunner, "_evaluate_once", lambda self, ref, sampling: answers.pop(0))
    monkeypatch.setattr(EnvServerRunner, "_unreachable", lambda self: "")

    def sleep(s):
        slept.append(s)
        CLOCK.now += s

    monkeypatch.setattr(
        waiting.Backoff,
        "__init__",
        lambda self, status_path="": BACKOFF(self, status_path, sleep=sleep, clock=CLOCK, log=lambda *a, **k: None),
    )
    return EnvServerRunner("http://127.0.0.1:1", "mini-swe-agent", "docker", f"{ENGINE}/v1", "m", 4, 60.0)


def test_the_main_process_rollouts_stop_waiting_on_an_engine_that_is_gone(monkeypatch):
    """The warm-up and the evaluation (main process) ask the watch at each wait; the rollout worker's runner, which
    the trainer's own check_health bounds, waits as before."""
    slept: list[float] = []
    watch = HealthWatch(ENGINE, answer=lambda url: "ConnectError: refused", clock=CLOCK)
    r = runner(monkeypatch, [ENGINE_DOWN] * 10, slept)
    with pytest.raises(EngineGone, match="while the trainer waited for evaluation rollouts"):
        r.watching(watch).evaluate(TaskRef("s", 0), {})
    assert slept == [2.0, 4.0, 8.0, 16.0]  # the 5th wait's probe is 30 s after the first failing one

    child = runner(monkeypatch, [ENGINE_DOWN] * 5 + [GOOD], slept := [])
    assert child.engine_watch is None
    assert child.run(TaskRef("s", 0), None, "e1") is GOOD
    assert slept == [2.0, 4.0, 8.0, 16.0, 30.0]


# --- the stop: status, the one line, the exit code ----------------------------------------------------------------
def stop(tmp_path, capsys, gone, weight_transfer="mock", env=None, resume=None):
    s = config.from_env(
        {"WEIGHT_TRANSFER": weight_transfer, "RUN_NAME": "run-1", "BUCKET_DIR": str(tmp_path), **(env or {})}
    )
    status = RunStatus(tmp_path / "status.json", "run-1", 50)
    status.update(state="training", step=3)
    try:
        with pytest.raises(SystemExit) as caught:
            engine_gone.stop_run(gone, status, s, resume)
    finally:
        faulthandler.cancel_dump_traceback_later()  # armed for the teardown of a trainer that exits
    out = capsys.readouterr()
    assert out.err == ""
    return caught.value.code, out.out.splitlines(), json.loads((tmp_path / "status.json").read_text())


def pushed_gone(step=3, saved="checkpoint-3"):
    gone = EngineGone(
        "http://127.0.0.1:18801",
        "pausing it for a weight push failed after 0.0 s",
        0.0,
        "ConnectionError: ('Connection aborted.', RemoteDisconnected('closed'))",
    )
    gone.step, gone.saved = step, saved
    return gone


def test_the_stop_writes_the_status_prints_one_line_and_exits_4(tmp_path, capsys):
    code, lines, doc = stop(tmp_path, capsys, pushed_gone())
    assert code == engine_gone.EXIT_CODE == 4
    assert lines == [
        "trainer: the engine at http://127.0.0.1:18801 is gone: pausing it for a weight push failed after 0.0 s "
        "(ConnectionError: ('Connection aborted.', RemoteDisconnected('closed'))). Stopped (exit 4); step 3 is saved "
        "(checkpoint-3). Compose does not restart the engine. To resume: `scripts/compose -f compose.yaml -f "
        "compose.cpu.yaml up -d engine`, then `RUN_NAME=run-1 scripts/compose -f compose.yaml -f compose.cpu.yaml up "
        "-d trainer`"
    ]
    assert (doc["state"], doc["step"], doc["last_checkpoint"]) == ("stopped", 3, "checkpoint-3")
    assert doc["reason"] == (
        "the engine at http://127.0.0.1:18801 is gone: pausing it for a weight push failed after 0.0 s "
        "(ConnectionError: ('Connection aborted.', RemoteDisconnected('closed')))"
    )


def test_the_resume_steps_follow_the_form(tmp_path, capsys):
    _, gpu, _ = stop(tmp_path, capsys, pushed_gone(), weight_transfer="nccl")
    assert gpu[0].endswith(
        "step 3 is saved (checkpoint-3). Compose does not restart the engine. To resume: `docker compose up -d "
        "engine`, then `RUN_NAME=run-1 docker compose up -d trainer`"
    )
    _, k8s, _ = stop(tmp_path, capsys, pushed_gone(), weight_transfer="nccl", env={"DEPLOYMENT": "kubernetes"})
    assert k8s[0].endswith(
        "step 3 is saved (checkpoint-3). The chart never restarts the engine Job. To resume: `kubectl -n <ns> delete "
        "job <release>-engine <release>-trainer --wait`, then `helm upgrade <release> ... --reuse-values` (same run "
        "name, run-1)"
    )


def test_gone_before_a_step_keeps_what_this_run_resumed_from(tmp_path, capsys):
    fresh = EngineGone(ENGINE, "its /health has not answered for 30 s while the trainer waited for rollouts", 30, "x")
    _, lines, doc = stop(tmp_path, capsys, fresh)
    assert "Stopped (exit 4); no step was trained yet, so nothing is saved. Compose does not" in lines[0]
    assert (doc["step"], doc["last_checkpoint"]) == (0, None)
    resumed = EngineGone(ENGINE, "its /health has not answered for 30 s while the trainer waited for rollouts", 30, "x")
    _, lines, doc = stop(tmp_path, capsys, resumed, resume=Path("/bucket/checkpoints/run-1/checkpoint-7"))
    assert "Stopped (exit 4); step 7 is saved (checkpoint-7). Compose does not" in lines[0]
    assert (doc["state"], doc["step"], doc["last_checkpoint"]) == ("stopped", 7, "checkpoint-7")
