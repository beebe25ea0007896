"""The engine lost mid-run stops the trainer with the step it trained saved, one line and exit 4
(trainer/watch/engine_gone.py). Real mock-engine processes, real HTTP, the real trainer.

- the weight-transfer chain train.py hands TRL (weights.chain over the mock's backend): a killed engine is noticed
  at once in the next push, and a frozen one within WEIGHT_SYNC_TIMEOUT_S (not TRL's 30 minutes);
- the rollout worker's check_health (what TRL calls every 5 s while the trainer waits for rollouts) raises once
  the engine's /health has failed for the watch's bound;
- the whole trainer (run_trainer.py, scripted agent through OpenEnv's capture proxy), the engine SIGKILLed during
  step 1: exit 4, checkpoint-1 on the bucket, status.json `stopped` with the reason, exactly one line.

Runs in the trainer image: tests/run-in-image trainer -q tests/integration/trainer/test_engine_gone.py
"""

from __future__ import annotations

import http.server
import json
import multiprocessing as mp
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import requests
import torch
from cpu_engine import cpu_engine, tiny_model
from support import free_ports, wait_healthy
from transformers import AutoModelForCausalLM

from stack.readers import trainer as config
from trainer.transfer import weights
from trainer.watch import engine_gone
from trainer.watch.engine_gone import EngineGone, HealthWatch

HERE = Path(__file__).parent
TIMEOUT_S = 10  # WEIGHT_SYNC_TIMEOUT_S's floor
# What a request to a SIGKILLed engine meets: refused, or reset while the kernel closes its sockets.
LOST = r"(ConnectionError|ConnectionRefusedError|ConnectionResetError): .+"


def start_engine(model_dir: Path, port: int, log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "mock_engine"],
        env={**os.environ, "MOCK_MODEL_DIR": str(model_dir), "MODEL": str(model_dir), "ENGINE_PORT": str(port)},
        stdout=open(log, "a"),
        stderr=subprocess.STDOUT,
    )


def push(chain, model):
    chain.pause()
    chain.send_weights((name, p.detach()) for name, p in model.named_parameters())
    chain.resume()


def test_a_killed_engine_fails_the_next_push_at_once_and_a_frozen_one_within_the_timeout(tmp_path):
    model_dir = tiny_model(tmp_path)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    engines: list[subprocess.Popen] = []
    try:
        for kill in (signal.SIGKILL, signal.SIGSTOP):
            (port,) = free_ports(1)
            url = f"http://127.0.0.1:{port}"
            engines.append(start_engine(model_dir, port, tmp_path / "engine.log"))
            wait_healthy(f"{url}/health", engines[-1])
            s = config.from_env(
                {
                    "WEIGHT_TRANSFER": "mock",
                    "ENGINE_URL": url,
                    "WEIGHT_SYNC_TIMEOUT_S": str(TIMEOUT_S),
                    "BUCKET_DIR": str(tmp_path),
                }
            )
            chain, _, watch = weights.chain(weights.build("mock", url, s.weight_sync_timeout_s), s, {})
            chain.say = lambda line: None
            chain.init_weight_transfer()
            push(chain, model)  # the first push (TRL's cold sync)
            assert requests.get(f"{url}/mock/weight_manifest", timeout=10).json()["weight_version"] == 1

            os.kill(engines[-1].pid, kill)
            t0 = time.monotonic()
            with pytest.raises(EngineGone) as caught:
                push(chain, model)
            took = time.monotonic() - t0
            gone = caught.value
            assert gone is watch.gone and gone.engine_url == url
            if kill == signal.SIGKILL:
                assert took < 5, took
                assert gone.what.startswith("pausing it for a weight push failed after 0.")
                assert re.fullmatch(LOST, gone.detail), gone.detail
                print(f"killed engine: EngineGone {took:.2f} s after the push began")
            else:  # frozen: answers nothing, so the mock backend's request times out
                assert TIMEOUT_S <= took < TIMEOUT_S + 10, took
                assert gone.what == f"pausing it for a weight push failed after {gone.after_s:.1f} s"
                assert gone.detail.endswith(f"; no answer within WEIGHT_SYNC_TIMEOUT_S={TIMEOUT_S} s"), gone.detail
                print(f"frozen engine: EngineGone {took:.1f} s after the push began")
    finally:
        for proc in engines:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)
                proc.kill()
                proc.wait(timeout=20)


class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server's name
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def test_the_rollout_workers_health_check_stops_on_an_engine_that_is_gone():
    """HarborRolloutWorker.check_health, the method TRL's RolloutQueueDataset calls, with TRL's own check after it
    (a child that is alive and ticking). The worker is not built (that spawns the child); only the state its check
    reads is set."""
    from trainer.rollouts.worker import HarborRolloutWorker

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    ctx = mp.get_context("spawn")
    worker = object.__new__(HarborRolloutWorker)
    worker._failed_event, worker._heartbeat_value = ctx.Event(), ctx.Value("d", time.time())
    worker.engine_watch = HealthWatch(f"http://127.0.0.1:{port}", gone_after_s=2.0)
    worker.check_health(600)  # the engine answers: nothing happens
    server.shutdown()
    server.server_close()  # the engine is gone: connections are refused from now on
    t0 = time.monotonic()
    with pytest.raises(EngineGone) as caught:
        while time.monotonic() - t0 < 10:
            worker.check_health(600)
            time.sleep(0.5)  # TRL's poll is 5 s; shortened with the bound
    assert 2.0 <= time.monotonic() - t0 < 5
    assert re.fullmatch(
        rf"the engine at http://127\.0\.0\.1:{port} is gone: its /health has not answered for 2 s while the trainer "
        r"waited for rollouts \(ConnectError: .+\)",
        caught.value.reason(),
    ), caught.value.reason()


def test_the_trainer_stops_with_the_step_saved_when_the_engine_is_killed_during_a_step(tmp_path):
    import trl  # noqa: F401 - the trainer image has TRL: a broken install must fail, not skip
    from test_cpu_training import train  # the same trainer launch as the CPU training suite

    run = "cpu-engine-gone"
    with cpu_engine(tmp_path) as engine:
        stack = {**engine, "work": tmp_path, "bucket": tmp_path / "bucket"}
        t0 = time.monotonic()
        log = train(
            stack,
            max_steps=4,
            run=run,
            extra_env={
                # = MAX_STEPS, the longest interval preflight accepts: checkpoint-1 can only be the engine-gone save
                "SAVE_STEPS": "4",
                "TEST_KILL_ENGINE_AT_STEP": "1",
                "TEST_ENGINE_PID": str(engine["engine_pid"]),
            },
            expect_rc=engine_gone.EXIT_CODE,
        )
        print(f"trainer exited {time.monotonic() - t0:.0f} s after its start")
    run_dir = stack["bucket"] / "checkpoints" / run
    assert "test: killed the engine" in log
    assert sorted(p.name for p in run_dir.glob("checkpoint-*")) == ["checkpoint-1"], log[-4000:]
    state = json.loads((run_dir / "checkpoint-1" / "trainer_state.json").read_text())
    assert state["global_step"] == 1
    assert (run_dir / "checkpoint-1" / "rollout_state.json").is_file()  # TRL's own save ran (_save_checkpoint)
    status = json.loads((run_dir / "status.json").read_text())
    assert (status["state"], status["step"], status["last_checkpoint"]) == ("stopped", 1, "checkpoint-1"), status
    url = re.escape(engine["engine"])
    assert re.fullmatch(
        rf"the engine at {url} is gone: pausing it for a weight push failed after \d+\.\d s \({LOST}\)",
        status["reason"],
    ), status["reason"]
    lines = [ln for ln in log.splitlines() if "is gone" in ln]
    assert lines == [
        f"trainer: {status['reason']}. Stopped (exit 4); step 1 is saved (checkpoint-1). Compose does not restart "
        "the engine. To resume: `scripts/compose -f compose.yaml -f compose.cpu.yaml up -d engine`, then "
        f"`RUN_NAME={run} scripts/compose -f compose.yaml -f compose.cpu.yaml up -d trainer`"
    ], lines
    # No traceback of it: the rollouts that met the dead engine log theirs (TRL scores them unscorable), not this.
    assert "EngineGone" not in log, log[-4000:]
