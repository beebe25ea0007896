"""The mock engine as a real process (python -m mock_engine) on a free loopback port.

Runs inside the mock-engine image (torch, transformers, openenv):
    tests/run-in-image mock-engine tests/integration/mock_engine
The model is the one baked into the image at /app/models/tiny-agent (built into a temp folder when the
image predates it).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import requests

sys.path.insert(0, str(Path(__file__).resolve().parent))

from mock_engine_support import (  # noqa: E402  # noqa: E402
    IMAGE_MODEL,
    SCRIPT_ACTIONS,
    SCRIPT_MATCH,
    SERVED,
    START_DEADLINE_S,
    set_faults,
)
from support import free_port, wait_until  # noqa: E402


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory) -> Path:
    if (IMAGE_MODEL / "config.json").exists():
        return IMAGE_MODEL
    out = tmp_path_factory.mktemp("model") / "tiny-agent"
    subprocess.run([sys.executable, "-m", "mock_engine.build_model", str(out)], check=True)
    return out


@contextlib.contextmanager
def serve(model_dir: Path, work: Path, **extra_env: str):
    """A mock engine process on a free loopback port; yields its base URL (no /v1)."""
    script = work / "scripted-actions.json"
    script.write_text(json.dumps([{"match": SCRIPT_MATCH, "actions": SCRIPT_ACTIONS}]))
    port = free_port()
    env = {
        **os.environ,
        "ENGINE_HOST": "127.0.0.1",
        "ENGINE_PORT": str(port),
        "MODEL": SERVED,
        "MOCK_MODEL_DIR": str(model_dir),
        "MOCK_SCRIPT_FILE": str(script),
        "MOCK_SCRIPT_PROB": "0.5",
        "MOCK_MAX_NEW_TOKENS": "48",
        "MOCK_OFF_SCRIPT": "command",
        "MOCK_FAULTS": "",
        **extra_env,
    }
    log = work / "engine.log"
    with log.open("w") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "mock_engine"], env=env, stdout=fh, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(
            lambda: proc.poll() is None and requests.get(f"{base}/health", timeout=2).ok or proc.poll() is not None,
            START_DEADLINE_S,
            "mock engine /health",
            log=log,
        )
        if proc.poll() is not None:
            raise AssertionError(f"mock engine exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture(scope="session")
def engine(tmp_path_factory, model_dir) -> str:
    """Base URL (no /v1) of a running mock engine with scripted mode on (prob 0.5)."""
    with serve(model_dir, tmp_path_factory.mktemp("mock-engine")) as base:
        yield base


@pytest.fixture(scope="session")
def engine_with_generation_config(tmp_path_factory, model_dir) -> str:
    """The same engine on a copy of the model whose generation_config.json sets top_k 1 (the runner-up
    is always cut, where Qwen3's top_k 20 / top_p 0.95 cut it only when the top token is confident)."""
    work = tmp_path_factory.mktemp("mock-engine-gc")
    model = work / "model"
    shutil.copytree(model_dir, model)
    config = json.loads((model / "generation_config.json").read_text())
    (model / "generation_config.json").write_text(json.dumps({**config, "top_k": 1, "top_p": 0.95}))
    with serve(model, work) as base:
        yield base


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
