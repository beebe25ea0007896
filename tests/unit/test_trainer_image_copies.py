"""Preflight runs in the trainer image, which carries only some of env-server's and tunnel-check's modules (the
readers guards/checks.py calls). Every module of those packages that guards imports must import from exactly what
images/trainer/Dockerfile copies: a module missing there is a crashed check in every real preflight (measured: the
env-server-settings check, once env_server/settings.py imported task_env.py, which the image did not copy)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Copied in part: the packages guards reaches into without the image carrying them whole.
PARTIAL = ("env_server", "tunnel_check")


def _copied(dockerfile: Path) -> list[str]:
    """Source paths under services/ that the Dockerfile's COPY lines take."""
    paths = []
    for line in dockerfile.read_text().replace("\\\n", " ").splitlines():  # continued lines joined
        if line.startswith("COPY ") and "services/" in line:
            paths += [p for p in line.split()[1:-1] if p.startswith("services/")]
    return paths


def _imported_by_guards() -> set[str]:
    """`from env_server.trials import x` -> env_server.trials; `from tunnel_check import settings` -> its module."""
    text = "".join(p.read_text() for p in (ROOT / "services/guards").glob("*.py"))
    return {
        f"{pkg}{sub or '.' + name}"
        for pkg, sub, name in re.findall(rf"from ({'|'.join(PARTIAL)})(\.\w+)? import (\w+)", text)
    }


def test_guards_imports_what_the_trainer_image_copies(tmp_path):
    services = tmp_path / "services"
    for source in _copied(ROOT / "images/trainer/Dockerfile"):
        src = ROOT / source
        dest = tmp_path / source
        dest.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if src.is_dir() else shutil.copy)(src, dest)
    modules = sorted(_imported_by_guards())
    # Only the copied tree: nothing on the way in from this checkout.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    assert {"env_server.settings", "env_server.trials", "tunnel_check.settings"} <= set(modules)
    for module in modules:
        run = subprocess.run(
            [sys.executable, "-c", f"import {module}"],
            cwd=services,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert run.returncode == 0, f"{module} in the trainer image: {run.stderr.strip().splitlines()[-1]}"
