"""lib.sh's run_with_progress: a long quiet step (debootstrap, 91 s measured) prints where it is at least
every PROGRESS_EVERY_S seconds, and its exit status comes through."""

from __future__ import annotations

import re
import subprocess

from scripts_support import ROOT


def test_progress_lines_carry_the_logs_last_line_and_the_status_comes_through(tmp_path):
    log = tmp_path / "step.log"
    script = (
        f'source "{ROOT}/scripts/lib.sh"; PROGRESS_EVERY_S=1 '
        f"run_with_progress debootstrap {log} bash -c 'echo I: Retrieving libc6; sleep 3; echo I: Unpacking; exit 3'; "
        'echo "status $?"'
    )
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60, check=False)
    lines = out.stdout.splitlines()
    assert lines[-1] == "status 3"
    progress = lines[:-1]
    assert progress, out.stdout
    # Each line: the time so far and the log's last line at that moment (empty before the step wrote one, the
    # second line in the instant before it exits).
    assert all(re.fullmatch(r"  debootstrap: \d+ s, (I: Retrieving libc6|I: Unpacking|)", line) for line in progress), (
        progress
    )
    assert any(line.endswith(", I: Retrieving libc6") for line in progress), progress
    assert log.read_text() == "I: Retrieving libc6\nI: Unpacking\n"
