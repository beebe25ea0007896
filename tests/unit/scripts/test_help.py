"""`--help` of every operator script answers with its usage and does nothing else: docker, apt-get and
debootstrap are stubs that record any call and fail, and no call may be recorded (issue 30: `scripts/evaluate
--help` started a production build)."""

from __future__ import annotations

import os

import pytest
from scripts_support import ROOT, calls, failing_stub, run_script

SCRIPTS = sorted(
    p for p in (ROOT / "scripts").iterdir() if p.is_file() and os.access(p, os.X_OK) and p.name != "lib.sh"
)


def test_every_script_is_covered():
    # lib.sh is sourced, never run; everything else in scripts/ is a command a user may ask for help.
    assert {p.name for p in SCRIPTS} >= {"clean", "compose", "cpu-up", "evaluate", "status", "test"}


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_prints_usage_and_calls_nothing(script, flag, stub_bin, tmp_path):
    for name in ("docker", "docker-compose", "apt-get", "debootstrap"):
        failing_stub(stub_bin, name)
    home = tmp_path / "home"
    home.mkdir()
    args = ("--cpu", flag) if script.name in ("evaluate", "screen", "publish") else (flag,)
    out = run_script(script, *args, stub_bin=stub_bin, home=home)
    assert out.returncode == 0, out.stderr
    assert "usage:" in out.stdout.lower(), out.stdout
    assert calls(stub_bin) == []
    assert list(home.iterdir()) == []  # nothing installed into the user's home (~/.docker)
