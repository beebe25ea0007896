"""`python -m tunnel_check.health`: the container healthcheck.

Healthy only while a verified URL is published AND it was verified recently enough. "Recently
enough" is the withdraw bound (interval x failures + timeout, see settings.py): a running monitor
either re-verifies or withdraws within that time, so an older document means the monitor stalled
and the URL is no longer being watched. Prints one line either way (docker inspect shows it).
"""

from __future__ import annotations

import sys

import handoff

from .settings import ConfigError, load

# The hand-off is rewritten after each check's request returns; allow for that write and for a
# check that ends exactly at its timeout when failures_to_withdraw is 1.
GRACE_S = 1.0


def status(settings) -> tuple[bool, str]:
    verified = handoff.read(settings.handoff_dir)
    if verified is None:
        doc = handoff.read_raw(settings.handoff_dir)
        reason = doc.get("reason") or "nothing was ever published"
        return False, f"unhealthy: no verified URL is published ({reason})"
    age = verified.age_s()
    bound = settings.freshness_bound_s + GRACE_S
    if age > bound:
        return False, (
            f"unhealthy: {verified.url} was last verified {age:.1f}s ago, beyond the {bound:g}s "
            "freshness bound (interval x failures + timeout + grace): the tunnel-check monitor is not "
            "re-checking (see docker compose logs tunnel-check)"
        )
    return True, (
        f"healthy: {verified.url} ({verified.provider}) serves capture proxy instance "
        f"{verified.instance}, verified {age:.1f}s ago"
    )


def main() -> int:
    try:
        settings = load()
    except ConfigError as exc:
        print(f"unhealthy: configuration error: {exc}")
        return 1
    healthy, line = status(settings)
    print(line)
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main())
