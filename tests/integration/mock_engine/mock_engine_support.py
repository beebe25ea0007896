"""Constants and helpers shared by the mock engine's integration tests (conftest puts this folder on
sys.path: pytest's importlib mode does not)."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import requests

IMAGE_MODEL = Path("/app/models/tiny-agent")
# Interpreter start-up with torch on a loaded 2-core host has been measured at tens of seconds.
START_DEADLINE_S = 180.0
SERVED = "tiny-agent"
SCRIPT_MATCH = "SCRIPTED-TASK-7"
SCRIPT_ACTIONS = ["ls -la", "cat README.md"]
BASH_TOOL = {  # mini-swe-agent 2.4.6's tool (minisweagent/models/utils/actions_toolcall.py)
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Execute a bash command",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string", "description": "The bash command to execute"}},
            "required": ["command"],
        },
    },
}


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


def set_faults(base: str, **doc) -> dict:
    resp = requests.post(f"{base}/mock/faults", json=doc, timeout=10)
    resp.raise_for_status()
    return resp.json()
