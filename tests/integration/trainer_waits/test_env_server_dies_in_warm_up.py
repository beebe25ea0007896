"""An env server that dies during the trainer's warm-up rollout is waited out, and the rollout runs again
when it is back (issue 29: before this, `websockets.exceptions.ConnectionClosedError: no close frame
received or sent` killed the trainer, 2 of 2 tries, because trainer/rollouts/factory.py caught only ConnectionError
and httpx.TransportError).

Real parts: the trainer's EnvServerRunner, HarborSessionFactory and HarborRolloutSession driven exactly as
train.warm_up drives them (create -> wait_for_completion -> fetch_training_trace), OpenEnv's HarborEnv
client, and a real OpenEnv Task API + MCP server process (rollout_peer.py) that is SIGKILLed while the
rollout is in flight and started again on the same port. The stand-in part is the rollout itself (no
sandbox, no engine): the peer hangs or answers.
"""

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from support import free_port

from trainer.rollouts import waiting
from trainer.rollouts.factory import EnvServerRunner, HarborSessionFactory, prompt_row

HERE = Path(__file__).resolve().parent
# Bounded loops, not timings: each wait below ends as soon as its condition holds.
STEP_S, LIMIT_S = 0.1, 60.0


def until(condition, what: str) -> None:
    for _ in range(int(LIMIT_S / STEP_S)):
        if condition():
            return
        time.sleep(STEP_S)
    raise AssertionError(f"not within {LIMIT_S:.0f} s: {what}")


def peer(port: int, mode: str, log: Path, marker: Path | None = None) -> subprocess.Popen:
    args = [sys.executable, str(HERE / "rollout_peer.py"), str(port), mode] + ([str(marker)] if marker else [])
    proc = subprocess.Popen(args, stdout=open(log, "a"), stderr=subprocess.STDOUT)

    def answers() -> bool:
        assert proc.poll() is None, log.read_text()
        try:
            return httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    until(answers, f"rollout_peer {mode} answers /health")
    return proc


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch):
    # The schedule itself is tests/unit/trainer/test_waiting.py's; here only that the wait ends.
    monkeypatch.setattr(waiting, "FIRST_DELAY_S", 0.2)
    monkeypatch.setattr(waiting, "MAX_DELAY_S", 0.5)


def test_the_warm_up_waits_out_an_env_server_killed_mid_rollout_and_runs_again(tmp_path, capsys):
    port = free_port()
    log, marker = tmp_path / "peer.log", tmp_path / "rollout-started"
    status = tmp_path / "status.json"
    status.write_text(json.dumps({"state": "warming-up", "step": 0}))
    runner = EnvServerRunner(
        env_server_url=f"http://127.0.0.1:{port}",
        harness="mini-swe-agent",
        sandbox="docker",
        llm_url="http://127.0.0.1:1/v1",
        model="m",
        agent_step_limit=4,
        agent_timeout_s=120.0,
        status_path=str(status),
    )
    row = prompt_row("starter", 0, "Count the lines.", "count-lines")
    first = peer(port, "hang", log, marker)
    outcome: dict = {}
    states: list = []

    def warm_up() -> None:  # what train.warm_up does with the session
        try:
            session = HarborSessionFactory(runner, sampling={"temperature": 1.0}).create(
                row["prompt"], seed=0, episode_id="warm-up"
            )
            session.wait_for_completion()
            outcome["turns"] = len(session.fetch_training_trace().turns)
            outcome["reward"] = session.verify([]).env_reward
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            outcome["error"] = exc

    thread = threading.Thread(target=warm_up, daemon=True)
    thread.start()
    try:
        until(marker.exists, "the warm-up rollout reached the env server")
        first.kill()  # SIGKILL mid-rollout: no close frame
        first.wait()

        def waiting_state() -> bool:
            doc = json.loads(status.read_text())
            states.append(doc.get("state"))
            assert "error" not in outcome, outcome
            return doc.get("state") == waiting.WAITING_STATE

        until(waiting_state, "status.json says the trainer is waiting")
        second = peer(port, "answer", log)
        try:
            thread.join(LIMIT_S)
        finally:
            second.kill()
            second.wait()
    finally:
        if first.poll() is None:
            first.kill()
    assert not thread.is_alive(), "the warm-up did not finish after the env server came back"
    assert "error" not in outcome, repr(outcome.get("error"))
    assert outcome == {"turns": 1, "reward": 1.0}
    out = capsys.readouterr().out
    waits = [line for line in out.splitlines() if "rollouts refused, waiting" in line]
    print(out)
    # One status line for the lost connection (the unreachable server's own line may follow while it restarts).
    assert waits[0] == (
        f"trainer: rollouts refused, waiting (retry in 0.2s): connection to the env server {runner.env_server_url} "
        "lost during the rollout (ConnectionClosedError: no close frame received or sent); it runs again once the "
        "env server answers"
    ), out
    assert len([w for w in waits if "lost during the rollout" in w]) == 1, waits
    assert out.count("trainer: rollouts accepted again after ") == 1, out
    assert json.loads(status.read_text())["state"] != waiting.WAITING_STATE
