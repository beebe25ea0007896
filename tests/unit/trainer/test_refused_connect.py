"""A refused connection to the env server is waited out at every phase, the task list and the warm-up included,
although OpenEnv's client does not raise it as one.

OpenEnv 0.10.0's `HarborEnv` hides a failed connect behind `TypeError: object NoneType can't be used in 'await'
expression` (its connect clean-up awaits a method that returns None). Before trainer/rollouts/factory.transport_failure
that TypeError stopped a trainer started while the env server was down, and a warm-up whose /health probe passed a
moment before the env server died. The connect here is the real client's, to a port where nothing listens (or to
a stand-in that grants the MCP session and answers no websocket). Stand-ins: the /health probe that answered just
before (the race, which cannot be timed from a test) and the second attempt's answer (no env server in the host
venv). Sleeping is recorded, not done.
"""

import json
import socket

import pytest
from openenv.harbor.models import HarborRolloutResult, HarborTurn

from trainer.rollouts import waiting
from trainer.rollouts.factory import EnvServerRunner, HarborSessionFactory, prompt_row, transport_failure

SCORED = HarborRolloutResult(
    ok=True,
    reward=1.0,
    task_name="count-lines",
    trial_name="count-lines__a1b2",
    rollout_type="train",
    capture_level="tokens",
    turns=[
        HarborTurn(
            turn=0,
            prompt_token_ids=[1, 2, 3],
            completion_token_ids=[5, 6],
            per_token_logps=[-0.1, -0.2],
            loss_mask=[0, 0, 0, 1, 1],
            node_id="n0",
            sampling_params={"temperature": 1.0},
        )
    ],
)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens once closed


@pytest.fixture
def slept(monkeypatch):
    slept: list[float] = []
    real = waiting.Backoff.__init__

    def init(self, status_path=""):
        real(self, status_path, sleep=slept.append, clock=lambda: float(len(slept)), log=lambda *a, **k: None)

    monkeypatch.setattr(waiting.Backoff, "__init__", init)
    return slept


def runner_at(tmp_path, state: str) -> tuple[EnvServerRunner, object]:
    status = tmp_path / "status.json"
    status.write_text(json.dumps({"state": state, "step": 0}))
    url = f"http://127.0.0.1:{closed_port()}"
    r = EnvServerRunner(url, "mini-swe-agent", "docker", "http://e/v1", "m", 4, 60.0, "", str(status))
    return r, status


def test_the_client_hides_a_refused_connect_behind_a_type_error_and_transport_failure_finds_it(tmp_path):
    r, _ = runner_at(tmp_path, "warming-up")
    with pytest.raises(TypeError, match="can't be used in 'await' expression") as caught:
        r._task_rows()
    lost = transport_failure(caught.value)
    assert (type(lost).__name__, str(lost)) == ("ConnectError", "All connection attempts failed")
    # Not the wire: a TypeError of our own, or any other error with a transport error behind it, is not waited out.
    assert transport_failure(TypeError("unsupported operand")) is None
    try:
        try:
            raise ConnectionError("refused")
        except ConnectionError:
            raise ValueError("the answer did not parse") from None
    except ValueError as other:
        assert transport_failure(other) is None


def test_a_granted_session_whose_websocket_is_refused_is_found_two_masks_deep(tmp_path):
    """The MCP session is granted over HTTP, then the websocket's connect fails: OpenEnv masks it twice (EnvClient's
    clean-up, then MCPClientBase's). The stand-in grants any session and answers no websocket."""
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    from websockets.exceptions import WebSocketException

    from trainer.rollouts.factory import TaskRef

    class GrantsSessionsOnly(BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            body = json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"session_id": "s1"}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), GrantsSessionsOnly)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        r = EnvServerRunner(f"http://127.0.0.1:{server.server_port}", "h", "docker", "http://e/v1", "m", 4, 60.0)
        with pytest.raises(TypeError) as caught:
            r._run_once(TaskRef("s", 0), None)
    finally:
        server.shutdown()
        server.server_close()
    masks = [type(caught.value).__name__, type(caught.value.__context__).__name__]
    assert masks == ["TypeError", "TypeError"]
    assert isinstance(transport_failure(caught.value), WebSocketException)


def test_the_warm_up_waits_out_a_refused_connect_and_runs_the_rollout_again(tmp_path, monkeypatch, slept):
    r, status = runner_at(tmp_path, "warming-up")
    seen: list[dict] = []
    real_run_once = EnvServerRunner._run_once

    def run_once(self, ref, sampling):
        seen.append(json.loads(status.read_text()))
        if len(seen) == 1:
            return real_run_once(self, ref, sampling)  # the real client, refused: the server just died
        return SCORED  # the env server is back

    monkeypatch.setattr(EnvServerRunner, "_run_once", run_once)
    monkeypatch.setattr(EnvServerRunner, "_unreachable", lambda self: "")  # /health answered just before
    # As train.warm_up drives it.
    session = HarborSessionFactory(r, sampling={"temperature": 1.0}).create(
        prompt_row("starter", 0, "Count the lines.", "count-lines")["prompt"], seed=0, episode_id="warm-up"
    )
    assert session.wait_for_completion() == 0
    assert len(session.fetch_training_trace().turns) == 1
    assert session.verify([]).env_reward == 1.0
    assert slept == [2.0] and len(seen) == 2
    assert (seen[1]["state"], seen[1]["reason"]) == (
        "waiting-for-rollouts",
        f"env server {r.env_server_url} unreachable (ConnectError: All connection attempts failed)",
    )
    assert json.loads(status.read_text())["state"] == "training"


def test_a_trainer_started_while_the_env_server_is_down_waits_for_the_task_list(tmp_path, monkeypatch, slept):
    r, status = runner_at(tmp_path, "warming-up")
    seen: list[dict] = []
    real_task_rows = EnvServerRunner._task_rows
    rows = [prompt_row("starter", 0, "Count the lines.", "count-lines")]

    def task_rows(self):
        seen.append(json.loads(status.read_text()))
        return real_task_rows(self) if len(seen) == 1 else rows

    monkeypatch.setattr(EnvServerRunner, "_task_rows", task_rows)
    assert r.task_rows() == rows
    assert slept == [2.0]
    assert (seen[1]["state"], seen[1]["reason"]) == (
        "waiting-for-rollouts",
        f"env server {r.env_server_url} unreachable for the task list (ConnectError: All connection attempts failed)",
    )


def test_an_error_that_is_not_the_wire_still_ends_the_warm_up(tmp_path, monkeypatch, slept):
    r, _ = runner_at(tmp_path, "warming-up")

    def run_once(self, ref, sampling):
        raise TypeError("unsupported operand type(s) for +: 'int' and 'str'")

    monkeypatch.setattr(EnvServerRunner, "_run_once", run_once)
    monkeypatch.setattr(EnvServerRunner, "_unreachable", lambda self: "")
    session = HarborSessionFactory(r).create(prompt_row("starter", 0, "x", "t")["prompt"], seed=0, episode_id="w")
    with pytest.raises(TypeError, match="unsupported operand"):
        session.wait_for_completion()
    assert slept == []
