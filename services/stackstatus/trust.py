"""Whether the env server still trusts the capture URL in the hand-off, and if not, why.

`scripts/status` used to print the last verified URL and its age while the env server had already
stopped trusting it (a killed tunnel-check cannot withdraw its record; the record ages out). The answer
must be the env server's own: a record newer than its `valid_until` (or, for a record written without
one, tunnel-check's withdrawal bound: interval x failures + timeout, plus a second), and in state
`verified`.
"""

from __future__ import annotations


def url_trust(doc: dict, now: float, max_age_s: float) -> tuple[bool, str]:
    """(trusted, why not) for one hand-off document."""
    state = doc.get("state")
    if state == "withdrawn":
        return False, f"withdrawn by tunnel-check: {doc.get('reason') or 'no reason given'}"
    if state != "verified" or not doc.get("url"):
        return False, f"no verified URL ({state or 'nothing published'})"
    try:
        verified_at = float(doc["verified_at"])
        valid_until = float(doc["valid_until"]) if doc.get("valid_until") is not None else verified_at + max_age_s
    except (KeyError, TypeError, ValueError):
        return False, "the hand-off record is malformed (no verified_at)"
    if now > valid_until:
        return False, (
            f"last verified {now - verified_at:.0f} s ago, past its trust window by {now - valid_until:.0f} s: "
            "tunnel-check stopped re-checking it (docker compose logs tunnel-check); rollouts are refused"
        )
    return True, ""
