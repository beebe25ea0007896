"""`python -m guards`: the preflight service. Exit 0 when the run can start, 1 with every problem listed."""

import sys

from .checks import run_all


def main() -> int:
    failures = run_all(phase="preflight")
    if not failures:
        print("preflight: all checks passed", flush=True)
        return 0
    print(f"preflight: {len(failures)} problem(s) stop this run before any GPU time is spent:", file=sys.stderr)
    for failure in failures:
        print(f"  {failure}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
