"""The mock engine as a real process (python -m mock_engine) on a free loopback port.

Runs inside the mock-engine image (torch, transformers, openenv):
    tests/run-in-image mock-engine tests/integration/mock_engine
The model is the one baked into the image at /app/models/tiny-agent (built into a temp folder when the
image predates it).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

REPO = Path(__file__).resolve().parents[3]
IMAGE_MODEL = Path("/app/models/tiny-agent")
# Interpreter start-up with torch on a loaded 2-core host has been measured at tens of seconds.
START_DEADLINE_S = 180.0
SERVED = "tiny-agent"
SCRIPT_MATCH = "SCRIPTED-TASK-7"
SCRIPT_ACTIONS = ["ls -la", "cat README.md"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, deadline_s: float, what: str, log: Path | None = None, poll_s: float = 0.2):
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            if predicate():
                return
        except Exception:  # noqa: BLE001 -- not up yet
            pass
        time.sleep(poll_s)
    tail = log.read_text()[-3000:] if log and log.exists() else ""
    raise AssertionError(f"{what} not true within {deadline_s:.0f}s\n{tail}")


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory) -> Path:
    if (IMAGE_MODEL / "config.json").exists():
        return IMAGE_MODEL
    out = tmp_path_factory.mktemp("model") / "tiny-agent"
    subprocess.run([sys.executable, "-m", "mock_engine.build_model", str(out)], check=True)
    return out


@pytest.fixture(scope="session")
def engine(tmp_path_factory, model_dir) -> str:
    """Base URL (no /v1) of a running mock engine with scripted mode on (prob 0.5)."""
    work = tmp_path_factory.mktemp("mock-engine")
    script = work / "scripted-actions.json"
    script.write_text(json.dumps([{"match": SCRIPT_MATCH, "actions": SCRIPT_ACTIONS}]))
    port = free_port()
    env = {
        **os.environ,
        "ENGINE_HOST": "127.0.0.1", "ENGINE_PORT": str(port), "MODEL": SERVED, "MOCK_MODEL_DIR": str(model_dir),
        "MOCK_SCRIPT_FILE": str(script), "MOCK_SCRIPT_PROB": "0.5", "MOCK_MAX_NEW_TOKENS": "48",
        "MOCK_FAULTS": "",
    }
    log = work / "engine.log"
    with log.open("w") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "mock_engine"], env=env, stdout=fh, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: proc.poll() is None and requests.get(f"{base}/health", timeout=2).ok or proc.poll() is not None,
                 START_DEADLINE_S, "mock engine /health", log)
        if proc.poll() is not None:
            raise AssertionError(f"mock engine exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


def set_faults(base: str, **doc) -> dict:
    resp = requests.post(f"{base}/mock/faults", json=doc, timeout=10)
    resp.raise_for_status()
    return resp.json()


@pytest.fixture(autouse=True)
def _clear_faults(request):
    yield
    if "engine" in request.fixturenames:
        set_faults(request.getfixturevalue("engine"), active=[])


@pytest.fixture(scope="session")
def hf(model_dir):
    """The same weights loaded the way the CPU trainer loads them."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir), AutoModelForCausalLM.from_pretrained(model_dir).eval()
