"""Steps and wall time to learn through the whole CPU stack, and the control beside it.

    .venv/bin/python benchmarks/learning_stack.py            (after scripts/build-cpu-images --learn; ~70 min each)

Runs the test command's learning gate (tests/learning) twice, one after the other on this host: as the test
command runs it, then with LEARNING_GATE_CONTROL=1 (the mock engine's `weights_not_served` fault: every weight
push acknowledged, the served version counted up, the base weights still answering). Prints each run's
figures (baseline and final held-out pass@1 with 95% Wilson intervals, reward per step, the resume, wall
time) and whether the gate passed: the first must pass and the control must fail the same assertion, or the
gate proves nothing. docs/LEARNING.md holds a run's output.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(control: bool) -> dict:
    env = {**os.environ, "LEARNING_GATE_CONTROL": "1" if control else "0"}
    t0 = time.time()
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-s", "tests/learning"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    text = out.stdout + out.stderr
    figures = re.findall(r"^learning gate: (.*)$", text, re.M)
    table = re.findall(r"^(?:step \|.*|---.*|\d+ \|.*)$", text, re.M)
    return {"rc": out.returncode, "wall_s": time.time() - t0, "figures": figures, "curve": table, "tail": text[-3000:]}


def parse(argv: list[str] | None) -> argparse.Namespace:
    """`--help` prints this file's usage and exits before anything runs: each run is a whole CPU stack for ~70 min."""
    parser = argparse.ArgumentParser(
        prog="benchmarks/learning_stack.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    parse(argv)
    results = {name: run(control) for name, control in (("learning run", False), ("control", True))}
    for name, r in results.items():
        print(f"\n## {name}: pytest exit {r['rc']}, {r['wall_s']:.0f} s")
        for line in r["figures"]:
            print(line)
        print("\n".join(r["curve"]))
        if r["rc"] != 0:
            print(r["tail"])
    # The control's test asserts that the gate FAILED it (tests/learning), so both exit 0 when all is well.
    ok = all(r["rc"] == 0 for r in results.values())
    print(f"\ngate passes the learning run and fails the control: {'yes' if ok else 'NO'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
