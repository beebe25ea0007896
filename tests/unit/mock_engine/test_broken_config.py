"""The mock engine with a broken config.json in MOCK_MODEL_DIR: one line naming the fix, not a transformers
traceback (the real entry point, as compose starts it)."""

import subprocess
import sys
from pathlib import Path

import pytest

SERVICES = Path(__file__).resolve().parents[3] / "services"


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('{"model_type": ', "JSONDecodeError: Expecting value: line 1 column 16 (char 15)"),
        ("[1, 2]", "ValueError: not a JSON object"),
    ],
)
def test_a_broken_config_json_is_one_line(tmp_path, text, why):
    (tmp_path / "config.json").write_text(text)
    out = subprocess.run(
        [sys.executable, "-m", "mock_engine"],
        cwd=SERVICES,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(SERVICES), "MOCK_MODEL_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (out.returncode, out.stdout) == (1, "")
    assert out.stderr == (
        f"mock_engine: MOCK_MODEL_DIR={tmp_path} has a broken config.json ({why}); rebuild it with "
        f"`python -m mock_engine.build_model {tmp_path}`\n"
    )
