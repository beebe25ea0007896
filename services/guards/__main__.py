"""`python -m guards [--phase trainer]`: preflight (the compose `preflight` service), or the trainer's own
checks before it loads a model (`python -m trainer` runs this command). Exit 0 when the run can start, 1
with every problem listed."""

import argparse
import sys

from .checks import run_all

HEADERS = {
    "preflight": "preflight: {n} problem(s) stop this run before any GPU time is spent:",
    "trainer": "trainer: {n} problem(s), nothing was started:",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m guards", description=__doc__)
    parser.add_argument("--phase", choices=sorted(HEADERS), default="preflight")
    phase = parser.parse_args(argv).phase
    failures = run_all(phase=phase)
    if not failures:
        print(f"{phase}: all checks passed", flush=True)
        return 0
    print(HEADERS[phase].format(n=len(failures)), file=sys.stderr)
    for failure in failures:
        print(f"  {failure}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
