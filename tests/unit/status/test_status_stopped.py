"""scripts/status against a stack that is not running: it must say so plainly, not crash or guess.
(The running case is asserted by the smoke test, against the CPU form under docker compose.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PROJECT = "asyncgrpo-status-never-started"


def status(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts/status"), "--project", PROJECT, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_json_for_a_stack_that_never_started():
    out = status("--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["project"] == PROJECT
    assert doc["services"] == {}
    assert doc["tunnel"]["state"].startswith("no hand-off volume")
    assert doc["engine"]["capture_level"] == "not running"
    assert doc["env_server"] == {"error": "not running"}
    assert "no bucket mount" in doc["training"]["missing"]


def test_human_output_names_what_to_do():
    out = status()
    assert out.returncode == 0, out.stderr
    assert "the stack is not up" in out.stdout and "docker compose up" in out.stdout
    for service in ("preflight", "engine", "env-server", "tunnel", "tunnel-check", "trainer"):
        assert service in out.stdout
