"""The verified capture-proxy URL, handed from tunnel-check to the env server (and the status command).

One small JSON file on a shared volume. tunnel-check writes it only after a request THROUGH the public
URL returned this proxy's own `/health` document; it rewrites it on every successful re-check (so
`verified_at` shows freshness) and replaces it with a withdrawal record when the URL stops serving
this proxy. The env server reads it when a rollout starts, never at boot, so a new quick-tunnel
hostname reaches the next sandbox without restarting anything.

Writes are atomic (temp file + rename): a reader never sees half a document, which would read as
"no URL" and refuse a rollout for no reason.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

FILENAME = "capture_url.json"


@dataclass(frozen=True)
class Verified:
    url: str
    instance: str  # the capture proxy's `instance` id that answered through `url`
    provider: str
    verified_at: float  # unix time of the last successful check through the URL
    published_at: float  # unix time this URL was first published

    def age_s(self, now: float | None = None) -> float:
        return (now if now is not None else time.time()) - self.verified_at


def handoff_dir(directory: str | os.PathLike | None = None) -> Path:
    return Path(directory or os.environ.get("HANDOFF_DIR") or "/handoff")


def _write(doc: dict, directory: str | os.PathLike | None) -> None:
    folder = handoff_dir(directory)
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".capture_url.", suffix=".tmp")
    with os.fdopen(fd, "w") as fh:
        json.dump(doc, fh)
    # Readable by the env server and status, whatever user they run as.
    os.chmod(tmp, 0o644)
    os.replace(tmp, folder / FILENAME)


def read_raw(directory: str | os.PathLike | None = None) -> dict:
    """The whole document (published or withdrawn), or `{}` when nothing was ever written."""
    try:
        return json.loads((handoff_dir(directory) / FILENAME).read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        return {"state": "unreadable", "reason": f"{type(exc).__name__}: {exc}"}


def read(directory: str | os.PathLike | None = None, max_age_s: float | None = None) -> Verified | None:
    """The currently verified URL, or None when none is published (never verified, withdrawn, or stale).

    `max_age_s`: treat a URL not re-verified for this long as withdrawn. tunnel-check withdraws on
    any orderly exit, but a SIGKILLed or OOM-killed tunnel-check leaves its last "verified" record
    behind; its age is then the only tell. Readers pass the same bound tunnel-check promises for a
    withdrawal (`max_age_from_env`).
    """
    doc = read_raw(directory)
    if doc.get("state") != "verified" or not doc.get("url"):
        return None
    if max_age_s is not None and time.time() - float(doc.get("verified_at", 0.0)) > max_age_s:
        return None
    return Verified(
        url=doc["url"],
        instance=doc.get("instance", ""),
        provider=doc.get("provider", ""),
        verified_at=float(doc.get("verified_at", 0.0)),
        published_at=float(doc.get("published_at", doc.get("verified_at", 0.0))),
    )


def max_age_from_env(env: dict | None = None) -> float:
    """How old a verification may be before readers stop trusting it: tunnel-check's own withdrawal
    bound (interval x failures + timeout) plus a second for the file write. Same settings, same defaults."""
    env = os.environ if env is None else env
    interval = float(env.get("TUNNEL_CHECK_INTERVAL_S") or 10)
    failures = int(env.get("TUNNEL_CHECK_FAILURES_TO_WITHDRAW") or 2)
    timeout = float(env.get("TUNNEL_CHECK_TIMEOUT_S") or 8)
    return interval * failures + timeout + 1.0


def publish(url: str, instance: str, provider: str, directory: str | os.PathLike | None = None) -> Verified:
    """Record `url` as verified now. Keeps `published_at` when the same URL is re-verified."""
    now = time.time()
    current = read(directory)
    published_at = current.published_at if current and current.url == url else now
    verified = Verified(url.rstrip("/"), instance, provider, now, published_at)
    _write({"state": "verified", **asdict(verified)}, directory)
    return verified


def withdraw(reason: str, directory: str | os.PathLike | None = None) -> None:
    """Take the URL back: the env server refuses new rollouts until a URL verifies again."""
    previous = read_raw(directory)
    _write(
        {
            "state": "withdrawn",
            "url": None,
            "withdrawn_url": previous.get("url") or previous.get("withdrawn_url"),
            "withdrawn_at": time.time(),
            "reason": reason,
        },
        directory,
    )
