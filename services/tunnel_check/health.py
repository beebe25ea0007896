"""`python -m tunnel_check.health`: the container healthcheck.

Healthy exactly while the hand-off holds a verified URL that is still valid (`stack.handoff.lookup`,
the same reading env-server makes): a running monitor rewrites the record before it expires or
withdraws it, so an expired record means the monitor stalled and the URL is no longer being watched.
Prints one line either way (docker inspect shows it).
"""

from __future__ import annotations

import sys

from stack import handoff
from stack.readers.tunnel_check import EnvError, load


def status(settings) -> tuple[bool, str]:
    verified, why = handoff.lookup(settings.handoff_dir)
    if verified is None:
        return False, f"unhealthy: no verified URL is published ({why})"
    return True, (
        f"healthy: {verified.url} ({verified.provider}) serves capture proxy instance "
        f"{verified.instance}, verified {verified.age_s():.1f}s ago"
    )


def main() -> int:
    try:
        settings = load()
    except EnvError as exc:
        print(f"unhealthy: configuration error: {'; '.join(exc.problems)}")  # a healthcheck's status is one line
        return 1
    healthy, line = status(settings)
    print(line)
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main())
