"""Helpers for the operator scripts' tests: stub commands, running a script, the calls it made.

The stubs stand in for docker and the package tools because these tests must prove what the scripts do
NOT do (build, start, install, remove someone else's things); the real daemon on this host holds images
another run uses."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def write_exe(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def failing_stub(folder: Path, name: str) -> None:
    """A command that must not be called: it records the call and fails."""
    write_exe(folder / name, f'#!/bin/sh\necho "{name} $*" >> "{folder.parent / "calls"}"\nexit 97\n')


def run_script(script: Path, *args: str, stub_bin: Path, home: Path, env: dict | None = None, timeout: float = 60):
    environ = {
        "PATH": f"{stub_bin}:{os.environ['PATH']}",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        **(env or {}),
    }
    return subprocess.run(
        [str(script), *args], capture_output=True, text=True, env=environ, timeout=timeout, check=False
    )


def calls(stub_bin: Path) -> list[str]:
    log = stub_bin.parent / "calls"
    return log.read_text().splitlines() if log.exists() else []
