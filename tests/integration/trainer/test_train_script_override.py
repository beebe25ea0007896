"""TRAIN_SCRIPT through the trainer's real entry point (`python -m trainer`): the override runs instead of the
canonical script, with the run's name and folder, from a copy in the run folder; a resumed run (same RUN_NAME)
runs that copy again even after the original was edited. Runs in the trainer image (the entry point imports
TRL): tests/run-in-image trainer tests/integration/trainer
"""

import os
import subprocess
import sys

RUN = "override-test"
SCRIPT = """import os
from pathlib import Path

run_dir = Path(os.environ["RUN_DIR"])
with open(run_dir / "ran.txt", "a") as out:
    out.write(f"{VERSION} {os.environ['RUN_NAME']} {run_dir} {__name__}\\n")
"""


def start(tmp_path, script):
    bucket = tmp_path / "bucket"
    bucket.mkdir(exist_ok=True)
    env = {
        "PATH": os.environ.get("PATH", ""),
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
        "HOME": str(tmp_path),
        "BUCKET_DIR": str(bucket),
        "HF_HOME": str(bucket / "hf-home"),
        "BUCKET_NOT_A_MOUNT_OK": "i-accept-losing-checkpoints",
        "REQUIRED_GPUS": "0",
        "WEIGHT_TRANSFER": "mock",
        "SANDBOX": "docker",
        "TUNNEL_PROVIDER": "direct",
        "MIN_FREE_DISK_GB": "0",
        "REPORT_TO": "none",
        "MODEL": "my-org/my-model",  # never loaded: the override is the whole training script
        "DATASETS": "local",
        "RUN_NAME": RUN,
        "TRAIN_SCRIPT": str(script),
    }
    out = subprocess.run([sys.executable, "-m", "trainer"], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout, bucket / "checkpoints" / RUN


def test_the_override_runs_from_its_copy_and_a_resume_runs_the_same_copy(tmp_path):
    script = tmp_path / "mine.py"
    script.write_text('VERSION = "first"\n' + SCRIPT)
    log, run_dir = start(tmp_path, script)
    copy = run_dir / "train_script.py"
    assert f"trainer: running TRAIN_SCRIPT={script} (copy: {copy})" in log.splitlines(), log
    assert (run_dir / "ran.txt").read_text() == f"first {RUN} {run_dir} __main__\n"

    script.write_text('VERSION = "second"\n' + SCRIPT)  # edited between the start and the resume
    start(tmp_path, script)
    assert (run_dir / "ran.txt").read_text() == f"first {RUN} {run_dir} __main__\n" * 2
    assert copy.read_text() == 'VERSION = "first"\n' + SCRIPT
