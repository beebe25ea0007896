"""The CPU form's engine killed after the first weight push, and one frozen mid-run: the trainer's weight-transfer
chain (weights.chain, as train.py builds it over the mock's real backend) waits, re-joins the engine that answers
next and sends it the current weights; the frozen engine is noticed within WEIGHT_SYNC_TIMEOUT_S, not TRL's 30
minutes. Real mock-engine processes, real HTTP; the trainer's weights are the tiny model's own, changed between
pushes so the re-joined engine is seen to serve them.

Runs in the trainer image: tests/run-in-image trainer -q tests/integration/trainer/test_engine_rejoin.py
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import requests
import torch
from cpu_engine import tiny_model
from support import free_ports, wait_healthy
from transformers import AutoModelForCausalLM

from trainer import config, weights

TIMEOUT_S = 10  # WEIGHT_SYNC_TIMEOUT_S's floor


def start_engine(model_dir: Path, port: int, log: Path) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-m", "mock_engine"],
        env={**os.environ, "MOCK_MODEL_DIR": str(model_dir), "MODEL": str(model_dir), "ENGINE_PORT": str(port)},
        stdout=open(log, "a"),
        stderr=subprocess.STDOUT,
    )
    return proc


def version(url: str) -> int:
    return int(requests.get(f"{url}/mock/weight_manifest", timeout=10).json()["weight_version"])


def push(chain):
    chain.pause()
    chain.send_weights(chain_weights())
    chain.resume()


MODEL: list = []


def chain_weights():
    return ((name, p.detach()) for name, p in MODEL[0].named_parameters())


def test_a_killed_engine_is_waited_for_and_rejoined_and_a_frozen_one_times_out(tmp_path):
    model_dir = tiny_model(tmp_path)
    MODEL.append(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32))
    (port,) = free_ports(1)
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "engine.log"
    engine = start_engine(model_dir, port, log)
    restarted: list[subprocess.Popen] = []
    try:
        wait_healthy(f"{url}/health", engine)
        s = config.from_env(
            {
                "WEIGHT_TRANSFER": "mock",
                "ENGINE_URL": url,
                "WEIGHT_SYNC_TIMEOUT_S": str(TIMEOUT_S),
                "RUN_NAME": "rejoin-test",
                "BUCKET_DIR": str(tmp_path),
            }
        )
        said: list[str] = []
        chain, served = weights.chain(weights.build("mock", url, s.weight_sync_timeout_s), chain_weights, s, {})
        lost = served.inner
        lost.say = said.append
        lost.backoff.log = lambda line, **_: said.append(line)
        lost.stop_requested = lambda: None
        chain.say = said.append
        chain.init_weight_transfer()
        push(chain)
        assert version(url) == 1
        assert said[-1].startswith("trainer: first weight sync done")
        said.clear()

        # Killed, then started again 5 s later (the operator's `docker compose up -d engine`).
        engine.kill()
        engine.wait()
        with torch.no_grad():
            next(MODEL[0].parameters()).add_(0.5)  # the step trained meanwhile
        threading.Timer(5.0, lambda: restarted.append(start_engine(model_dir, port, log))).start()
        t0 = time.monotonic()
        push(chain)  # waits, re-joins, pushes: no exception
        engine = restarted[0]
        assert lost.rejoins == 1, said
        assert said[0].startswith(f"trainer: the engine at {url} was lost while pausing the engine in a weight push")
        assert said[-1].startswith(f"trainer: re-joined the engine at {url} after ")
        # The new engine serves the trainer's weights (the re-join's push and TRL's own), not its base ones.
        assert version(url) == 2
        print(f"re-joined {time.monotonic() - t0:.1f} s after the push began")

        # Frozen (a hung engine answers nothing): noticed within the timeout, then waited out until it thaws.
        said.clear()
        os.kill(engine.pid, signal.SIGSTOP)
        threading.Timer(TIMEOUT_S + 5.0, lambda: os.kill(engine.pid, signal.SIGCONT)).start()
        t0 = time.monotonic()
        push(chain)
        took = time.monotonic() - t0
        assert f"no answer within WEIGHT_SYNC_TIMEOUT_S={TIMEOUT_S} s" in said[0], said
        assert lost.rejoins == 2
        assert TIMEOUT_S <= took < TIMEOUT_S + 60, took
        print(f"frozen engine: noticed and re-joined in {took:.1f} s")
        assert served.metrics()["weights/engine_stale"] == 0.0
    finally:
        for proc in {engine, *restarted}:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)
                proc.terminate()
                proc.wait(timeout=20)
