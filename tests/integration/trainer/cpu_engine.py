"""The mock engine (a real tiny LM, scripted half the time) and OpenEnv's real capture proxy in front of it,
as the trainer's CPU integration tests run them: one helper, so each suite starts the same pair.

    with cpu_engine(work) as stack:   # {"model", "engine", "engine_pid", "capture"}; logs under work/logs
        ...
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from support import free_ports, wait_healthy

HERE = Path(__file__).parent
# The script both suites share: the starter task's known-good actions, matched on "repository".
SCRIPT = [{"match": "repository", "actions": ["ls", "cat README.md"]}]


def tiny_model(work: Path) -> Path:
    """The image's tiny model, or one built into `work` where the image has none."""
    model_dir = Path("/app/models/tiny-agent")
    if not (model_dir / "config.json").is_file():
        model_dir = work / "tiny-agent"
        subprocess.run([sys.executable, "-m", "mock_engine.build_model", str(model_dir)], check=True, timeout=300)
    return model_dir


@contextlib.contextmanager
def cpu_engine(work: Path) -> Iterator[dict]:
    model_dir = tiny_model(work)
    engine_port, capture_port = free_ports(2)
    logs = work / "logs"
    logs.mkdir(exist_ok=True)
    script = work / "script.json"
    script.write_text(json.dumps(SCRIPT))
    engine = subprocess.Popen(
        [sys.executable, "-m", "mock_engine"],
        env={
            **os.environ,
            "MOCK_MODEL_DIR": str(model_dir),
            "MODEL": str(model_dir),
            "ENGINE_PORT": str(engine_port),
            "MOCK_MAX_NEW_TOKENS": "128",
            "MOCK_SCRIPT_FILE": str(script),
            "MOCK_SCRIPT_PROB": "0.5",
        },
        stdout=open(logs / "engine.log", "w"),
        stderr=subprocess.STDOUT,
    )
    engine_url = f"http://127.0.0.1:{engine_port}"
    proxy = subprocess.Popen(
        [sys.executable, str(HERE / "capture_proxy.py"), engine_url + "/v1", str(model_dir), str(capture_port)],
        stdout=open(logs / "proxy.log", "w"),
        stderr=subprocess.STDOUT,
    )
    try:
        wait_healthy(engine_url + "/health", engine)
        wait_healthy(f"http://127.0.0.1:{capture_port}/health", proxy)
        yield {
            "model": str(model_dir),
            "engine": engine_url,
            "engine_pid": engine.pid,
            "capture": f"http://127.0.0.1:{capture_port}",
        }
    finally:
        for proc in (proxy, engine):
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
