"""Fixtures for the operator scripts' tests: a copy of scripts/ in a throwaway repo, a folder of stubs.

The stubs stand in for docker and the package tools because these tests must prove what the scripts do
NOT do (build, start, install, remove someone else's things); the real daemon on this host holds images
another run uses."""

import shutil
import sys
from pathlib import Path

import pytest

# The helpers (scripts_support.py) sit next to the tests; importlib mode does not put them on the path.
sys.path.insert(0, str(Path(__file__).parent))
from scripts_support import ROOT  # noqa: E402


@pytest.fixture
def fake_repo(tmp_path) -> Path:
    """scripts/ copied into an empty repo, so whatever a script removes or creates stays in tmp_path."""
    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "scripts", repo / "scripts")
    return repo


@pytest.fixture
def stub_bin(tmp_path) -> Path:
    """A folder put first on PATH; `calls` (next to it) gets one line per stub call."""
    folder = tmp_path / "bin"
    folder.mkdir()
    return folder
