"""tests/gpu/run's carrying steps, run here on their own (no GPU): a piece folder is relative to where the
command runs, and unpacking installs into a fresh folder without pip's "already exists" warnings, which
meant pip had skipped that folder (the wheels' console scripts in bin/, or every package on a second
unpack on a held machine). The check itself then stops, as it must here, because vllm is not importable."""

import os
import subprocess
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def wheel(folder: Path) -> Path:
    """A minimal wheel with one console script: what pip installs into bin/."""
    path = folder / "gpucheck_demo-1.0-py3-none-any.whl"
    info = "gpucheck_demo-1.0.dist-info"
    files = {
        "gpucheck_demo/__init__.py": "def main():\n    print('demo')\n",
        f"{info}/METADATA": "Metadata-Version: 2.1\nName: gpucheck-demo\nVersion: 1.0\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{info}/entry_points.txt": "[console_scripts]\ngpucheck-demo = gpucheck_demo:main\n",
    }
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
        zf.writestr(f"{info}/RECORD", "".join(f"{name},,\n" for name in [*files, f"{info}/RECORD"]))
    return path


def run(args: list[str], cwd: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {
        "PATH": os.environ["PATH"],
        "GPU_CHECK_SITE": str(tmp_path / "site"),
        "GPU_CHECK_STASH": str(tmp_path / "stash"),
    }
    return subprocess.run([str(REPO / "tests/gpu/run"), *args], cwd=cwd, env=env, capture_output=True, text=True)


def test_stash_takes_the_piece_folder_relative_to_the_caller(tmp_path):
    (tmp_path / "caller" / ".whl").mkdir(parents=True)
    (tmp_path / "caller" / ".whl" / "vllm.tar.xz.0").write_bytes(b"piece")
    done = run(["--stash", ".whl"], tmp_path / "caller", tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "stash" / "vllm.tar.xz.0").read_bytes() == b"piece"
    assert done.stdout.startswith("gpu-check: stashed 1 piece(s);")


def test_a_missing_piece_folder_is_named(tmp_path):
    (tmp_path / "caller").mkdir()
    done = run(["--stash", "nope"], tmp_path / "caller", tmp_path)
    assert done.returncode == 2
    assert (
        done.stderr.strip()
        == f"gpu-check: {tmp_path / 'caller' / 'nope'} is not a folder of pieces (tests/gpu/README.md)"
    )


def test_unpack_installs_into_a_fresh_site_without_pips_already_exists_warning(tmp_path):
    pieces = tmp_path / "caller" / "pieces"
    pieces.mkdir(parents=True)
    wheel(pieces)
    for attempt in (1, 2):  # the second is a later call on the same held machine
        done = run(["--unpack", "pieces"], tmp_path / "caller", tmp_path)
        output = done.stdout + done.stderr
        assert "already exists" not in output, (attempt, output)
        assert "gpu-check: installed 1 wheels" in done.stdout, (attempt, output)
        assert (tmp_path / "site" / "bin" / "gpucheck-demo").is_file(), (attempt, output)
        assert (tmp_path / "site" / "bin" / "vllm").read_text().startswith("#!/usr/bin/env python3\n")
        assert (tmp_path / "site" / "gpucheck_demo" / "__init__.py").is_file()
        # vllm is not importable here: the check stops before it starts anything
        assert done.returncode == 2
        assert done.stderr.strip().endswith(
            "gpu-check: vllm, trl and openenv must be importable (tests/gpu/README.md says how to carry them)"
        )
