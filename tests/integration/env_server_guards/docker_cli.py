"""The docker CLI for this suite's tests (they run in the env-server image with the host's socket mounted)."""

from __future__ import annotations

import shutil
import subprocess

import pytest


def docker(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=120)


def require_daemon() -> None:
    """These tests exist to run against a real daemon: without one they fail, never skip."""
    if shutil.which("docker") is None or docker("info").returncode != 0:
        pytest.fail("no Docker daemon: run with the socket mounted (tests/run-in-image does)")
