"""The verified capture-proxy URL, handed from tunnel-check to the env server (and the status command).

One small JSON file on a shared volume. tunnel-check writes it only after a request THROUGH the public
URL returned this proxy's own `/health` document; it rewrites it on every successful re-check and
replaces it with a withdrawal record when the URL stops serving this proxy. The env server reads it
when a rollout starts, never at boot, so a new quick-tunnel hostname reaches the next sandbox without
restarting anything.

The record carries its own promise, `valid_until`: the writer (who knows its own schedule) states how
long the verification may be trusted if no newer record replaces it. A tunnel-check killed with
SIGKILL cannot withdraw its last record; the record then simply expires. No reader knows, or needs,
the writer's schedule: every reader asks `lookup()` for "the verified URL, or why there is none".
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from . import atomic, fields
from .env import Env
from .facts import HANDOFF_FILE


@dataclass(frozen=True)
class Verified:
    url: str
    instance: str  # the capture proxy's `instance` id that answered through `url`
    provider: str
    verified_at: float  # unix time of the last successful check through the URL
    published_at: float  # unix time this URL was first published
    valid_until: float  # unix time after which, with no newer record, nobody vouches for the URL

    def age_s(self, now: float | None = None) -> float:
        return (time.time() if now is None else now) - self.verified_at


def handoff_dir(directory: str | os.PathLike | None = None) -> Path:
    return Path(directory or Env(collect=True).get(fields.HANDOFF_DIR))


def handoff_path(directory: str | os.PathLike | None = None) -> Path:
    return handoff_dir(directory) / HANDOFF_FILE


def read_raw(directory: str | os.PathLike | None = None) -> dict:
    """The whole document as written (published or withdrawn), or `{}` when nothing was ever written.
    For display; decisions go through `lookup()`."""
    try:
        doc = json.loads(handoff_path(directory).read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        return {"state": "unreadable", "reason": f"{type(exc).__name__}: {exc}"}
    return doc if isinstance(doc, dict) else {"state": "unreadable", "reason": "not a JSON object"}


def lookup(directory: str | os.PathLike | None = None, *, now: float | None = None) -> tuple[Verified | None, str]:
    """(the verified URL, "") or (None, why there is none). The one reading of the hand-off."""
    doc = read_raw(directory)
    now = time.time() if now is None else now
    state = doc.get("state")
    if not doc:
        return None, "no URL verified yet (tunnel-check has published nothing)"
    if state == "unreadable":
        return None, f"hand-off {handoff_path(directory)} unreadable: {doc.get('reason')}"
    if state == "withdrawn":
        return None, f"withdrawn: {doc.get('reason') or 'no reason given'}"
    if state != "verified" or not doc.get("url"):
        return None, f"hand-off holds no verified URL (state {state!r})"
    try:
        verified = Verified(
            url=str(doc["url"]),
            instance=str(doc.get("instance") or ""),
            provider=str(doc.get("provider") or ""),
            verified_at=float(doc["verified_at"]),
            published_at=float(doc.get("published_at") or doc["verified_at"]),
            valid_until=float(doc["valid_until"]),
        )
    except (KeyError, TypeError, ValueError):
        return None, "hand-off record has no valid_until (written by an older tunnel-check): not trusted"
    if now > verified.valid_until:
        return None, (
            f"{verified.url} was last verified {verified.age_s(now):.0f}s ago and its record expired "
            f"{now - verified.valid_until:.0f}s ago: tunnel-check has stopped re-checking it "
            "(docker compose logs tunnel-check)"
        )
    return verified, ""


def publish(
    url: str, instance: str, provider: str, valid_for_s: float, directory: str | os.PathLike | None = None
) -> Verified:
    """Record `url` as verified now and trusted for `valid_for_s` seconds unless re-verified or withdrawn.
    Keeps `published_at` when the same URL is re-verified."""
    now = time.time()
    url = url.rstrip("/")
    previous = read_raw(directory)
    same = previous.get("state") == "verified" and previous.get("url") == url
    try:
        published_at = float(previous["published_at"]) if same else now
    except (KeyError, TypeError, ValueError):
        published_at = now
    verified = Verified(url, instance, provider, now, published_at, now + valid_for_s)
    atomic.write_json(handoff_path(directory), {"state": "verified", **asdict(verified)})
    return verified


def withdraw(reason: str, directory: str | os.PathLike | None = None) -> None:
    """Take the URL back: the env server refuses new rollouts until a URL verifies again."""
    previous = read_raw(directory)
    atomic.write_json(
        handoff_path(directory),
        {
            "state": "withdrawn",
            "url": None,
            "withdrawn_url": previous.get("url") or previous.get("withdrawn_url"),
            "withdrawn_at": time.time(),
            "reason": reason,
        },
    )


def main(argv: list[str]) -> int:
    """`python -m stack.handoff [DIR]`: the verdict every service acts on, and the record behind it, as
    JSON. Exit 0 with a usable URL, 1 without (for an operator, and for the smoke test)."""
    directory = argv[0] if argv else None
    verified, why = lookup(directory)
    print(
        json.dumps(
            {
                "verified": asdict(verified) if verified else None,
                "no_url_because": why or None,
                "record": read_raw(directory),
            }
        )
    )
    return 0 if verified else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
