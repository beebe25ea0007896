"""Constants and helpers shared by the mock engine's integration tests (conftest puts this folder on
sys.path: pytest's importlib mode does not)."""

from __future__ import annotations

from pathlib import Path

import requests

# mini-swe-agent 2.4.6's tool (minisweagent/models/utils/actions_toolcall.py), as the policy builder renders it.
from mock_engine.agent_turns import BASH_TOOL  # noqa: F401 -- re-exported for the suite

IMAGE_MODEL = Path("/app/models/tiny-agent")
# Interpreter start-up with torch on a loaded 2-core host has been measured at tens of seconds.
START_DEADLINE_S = 180.0
SERVED = "tiny-agent"
SCRIPT_MATCH = "SCRIPTED-TASK-7"
SCRIPT_ACTIONS = ["ls -la", "cat README.md"]


def set_faults(base: str, **doc) -> dict:
    resp = requests.post(f"{base}/mock/faults", json=doc, timeout=10)
    resp.raise_for_status()
    return resp.json()
