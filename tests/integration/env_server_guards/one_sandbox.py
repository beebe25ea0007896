"""A throwaway task's Harbor DockerEnvironment, as a trial makes it, for this suite's sandbox tests.

The starter task `count-lines` with a Dockerfile of the test's own, FROM the local base python:3.12-slim (nothing is
pulled), and a label with a fresh stamp so no earlier run's image is reused. `remove` tears the sandbox down and
removes its image: compose tags the build `<compose project>-main` (Harbor 0.25.0's build file names no `image:`).
"""

from __future__ import annotations

import asyncio
import secrets
import shutil
from pathlib import Path
from typing import Any

from docker_cli import docker

from env_server import prebuild

STARTER = Path(__file__).resolve().parents[3] / "datasets" / "starter" / "count-lines"


def task_environment(tmp_path: Path, name: str, run_lines: str = "") -> Any:
    """`name`'s environment (not started); `run_lines` go into its Dockerfile after FROM."""
    stamp = secrets.token_hex(4)
    root = tmp_path / name
    shutil.copytree(STARTER, root, ignore=shutil.ignore_patterns("environment"))
    config = root / "task.toml"
    config.write_text(config.read_text().replace("asyncgrpo-starter/count-lines", f"{name}-it/{stamp}"))
    (root / "environment").mkdir()
    (root / "environment" / "Dockerfile").write_text(f"FROM python:3.12-slim\n{run_lines}LABEL {name}-it={stamp}\n")
    [target] = prebuild.targets([root])
    return prebuild._environment(target.environment_dir, name, f"{name}-it-{stamp}__env", target.env_config)


def remove(env: Any) -> None:
    from harbor.environments.docker.docker import _sanitize_docker_compose_project_name

    asyncio.run(env.stop(delete=True))
    docker("rmi", "-f", f"{_sanitize_docker_compose_project_name(env.session_id)}-main")
