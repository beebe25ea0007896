"""Preflight runs in the trainer image and checks the trainer's, env-server's and tunnel-check's settings with their
own readers. Those readers live in stack/readers/ (standard library plus stack), so the image copies whole service
folders only, and guards imports no other service's package: once it copied loose files of env_server and
tunnel_check, and a reader that grew an import the image did not copy crashed every real preflight (measured: the
env-server-settings check, once env_server/settings.py imported task_env.py)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SERVICES = sorted(p.name for p in (ROOT / "services").iterdir() if (p / "__init__.py").is_file())
# The packages the trainer image carries whole: preflight (guards) may import these and nothing else of ours. It imports
# no trainer module (tests/unit/test_service_imports.py); two of its checks run one as a process (below).
CARRIED = {"stack", "guards", "trainer"}


def _copied(dockerfile: Path) -> list[str]:
    """Source paths under services/ that the Dockerfile's COPY lines take."""
    paths = []
    for line in dockerfile.read_text().replace("\\\n", " ").splitlines():  # continued lines joined
        if line.startswith("COPY ") and "services/" in line:
            paths += [p for p in line.split()[1:-1] if p.startswith("services/")]
    return paths


def test_the_trainer_image_copies_whole_service_folders_only():
    copied = _copied(ROOT / "images/trainer/Dockerfile")
    assert sorted(copied) == sorted(f"services/{name}" for name in CARRIED), copied


def test_guards_imports_no_service_the_image_does_not_carry():
    imported = set()
    for path in (ROOT / "services/guards").glob("*.py"):
        imported |= set(re.findall(r"^\s*(?:from|import) (\w+)", path.read_text(), flags=re.M))
    assert not (imported & set(SERVICES)) - CARRIED, sorted((imported & set(SERVICES)) - CARRIED)


def test_the_readers_preflight_calls_import_from_the_copied_tree(tmp_path):
    for source in _copied(ROOT / "images/trainer/Dockerfile"):
        shutil.copytree(ROOT / source, tmp_path / source)
    # Only the copied tree: nothing on the way in from this checkout.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    for module in (
        "guards.checks",
        "stack.readers.env_server",
        "stack.readers.tunnel_check",
        "stack.readers.trainer",
        "stack.resume",
        # guards runs these as `python -m` processes (guards/checks.py, _trainer_check)
        "trainer.train_script",
        "trainer.hub.hub_access",
    ):
        run = subprocess.run(
            [sys.executable, "-c", f"import {module}"],
            cwd=tmp_path / "services",
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert run.returncode == 0, f"{module} in the trainer image: {run.stderr.strip().splitlines()[-1]}"
