"""`python -m trainer`: the trainer service. Runs this phase's guards, reads the settings once, then either
hands over to TRAIN_SCRIPT or trains with the canonical script (train.run)."""

import logging
import os
import subprocess
import sys

from stack.env import EnvError
from stack.readers import reporting
from stack.readers.trainer import from_env

from .train import run
from .train_script import TrainScriptError, materialize, resolve
from .watch import stop
from .watch.stop_rules import from_env as stop_rules_from_env


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    # The guards of this phase (guards/checks.py), run as preflight's own command: the trainer does not
    # import preflight, which imports the trainer's readers to check them.
    if subprocess.run([sys.executable, "-m", "guards", "--phase", "trainer"], check=False).returncode != 0:
        return 1
    try:
        s = from_env()
    except EnvError as exc:  # preflight reports these first; this is the backstop
        print(f"trainer: {len(exc.problems)} bad setting(s), nothing was started:", file=sys.stderr)
        for line in exc.problems:
            print(f"  {line}", file=sys.stderr)
        return 1
    try:
        rules = stop_rules_from_env()
        reporting.check(s.report_to, os.environ)
    except EnvError as exc:  # a stop rule's threshold, or REPORT_TO=wandb without its key
        print(f"trainer: {exc}", file=sys.stderr)
        return 1
    if s.train_script:
        # The override replaces this script entirely; it gets the same environment and run folder.
        import runpy

        try:
            path = materialize(resolve(s.train_script), s.run_dir)
        except TrainScriptError as exc:
            print(f"trainer: {exc}", file=sys.stderr)
            return 1
        os.environ["RUN_NAME"], os.environ["RUN_DIR"] = s.run_name, str(s.run_dir)
        print(f"trainer: running TRAIN_SCRIPT={s.train_script} (copy: {path})", flush=True)
        runpy.run_path(str(path), run_name="__main__")
        return 0
    stop.install()
    run(s, rules=rules)
    return 0


if __name__ == "__main__":
    sys.exit(main())
