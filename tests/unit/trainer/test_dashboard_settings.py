"""The dashboard service reads its settings through its field table: a bad port is one line, not a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_a_bad_dashboard_port_is_one_line_naming_the_fix(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "trainer.report.dashboard"],
        env={
            "PATH": os.environ["PATH"],
            "PYTHONPATH": str(ROOT / "services"),
            "DASHBOARD_PORT": "78600",
            "BUCKET_DIR": str(tmp_path),
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1
    assert out.stderr == (
        "dashboard: DASHBOARD_PORT='78600' is not a TCP port: set DASHBOARD_PORT to a number in 1-65535 "
        "(default 7860)\n"
    )
