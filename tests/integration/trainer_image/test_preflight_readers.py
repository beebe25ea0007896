"""Preflight runs env-server's and tunnel-check's settings readers inside the trainer image (guards/checks.py); they
live in stack/readers/, which the image carries whole (images/trainer/Dockerfile). A reader that gained an import
of a file the image left out would crash preflight on every start: env-server's reader importing `task_env.py`
once did, when the image copied loose files, and every stack stopped at `[env-server-settings] check crashed
(ModuleNotFoundError ...)`. The in-image suites mount the checkout over /app's services and cannot see it;
this runs the built image as compose does, with nothing mounted.

Runs on the host after scripts/build-cpu-images (the CPU trainer image; the GPU one copies the same folders).
"""

from __future__ import annotations

import os
import subprocess

from support import docker_missing

IMAGE = f"asyncgrpo-harbor/trainer:{os.environ.get('IMAGE_TAG', 'local')}"


def test_the_trainer_image_imports_every_reader_preflight_runs():
    if subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True).returncode:
        docker_missing(f"{IMAGE} is not built (or no Docker daemon answers): scripts/build-cpu-images")
    code = (
        "import importlib\n"
        "for name in ('guards.checks', 'stack.readers.env_server', 'stack.readers.tunnel_check', 'stack.readers.trainer'):\n"
        "    importlib.import_module(name)\n"
        "print('imported')\n"
    )
    out = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", IMAGE, "python", "-c", code],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert (out.returncode, out.stdout.strip()) == (0, "imported"), out.stderr[-3000:]
