"""Read a forwarder's log: the public URL it announced, and what its connections are doing.

Two cloudflared formats reach us. Its console (stderr, `docker compose logs tunnel`) is zerolog's
console writer: `2024-07-09T08:18:43Z INF Registered tunnel connection connIndex=0 ...`. Its
`--logfile` is zerolog's raw JSON, one object a line: `{"level":"info","time":...,"message":...}`.
The quick-tunnel URL is not a field in either: cloudflared prints an ASCII box, one log record per
box line, and the URL is the record after "Your quick Tunnel has been created!". The logfile is
opened O_APPEND, so after a restart it holds every banner cloudflared ever printed: the LAST one is
the live tunnel's.

gradio share (OpenEnv's GradioForwarder, frpc) prints `Running on public URL: https://<id>.gradio.live`.

The parser also records connection events, so a failed check can say what the tunnel itself last
reported (e.g. `failed to accept QUIC stream`) next to what the request through it got.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

BANNER = "Your quick Tunnel has been created"
# Any URL inside the banner box, not just *.trycloudflare.com: the CPU form's stand-in announces
# http://<bridge-ip>:<port> in the same box, and cloudflared's --quick-service can point elsewhere.
_URL = re.compile(r"https?://[^\s|\"'<>]+")
_TRYCLOUDFLARE = re.compile(r"https://[-a-z0-9]+\.trycloudflare\.com\b")
_GRADIO = re.compile(r"Running on public URL:\s*(https?://[^\s\"'<>]+)")
_CONSOLE = re.compile(
    r"^(?P<time>\d{4}-\d\d-\d\dT[\d:.]+(?:Z|[+-]\d\d:?\d\d))\s+(?P<level>[A-Z]{3})\s+(?P<message>.*)$"
)
_LEVELS = {"DBG": "debug", "INF": "info", "WRN": "warn", "ERR": "error", "FTL": "fatal"}
_CONN_INDEX = re.compile(r"\bconnIndex=(\d+)")

# How many bytes of a (possibly long-running, never rotated) logfile to read: the newest banner is
# at most a few hundred lines from the end after any restart.
TAIL_BYTES = 1 << 20


@dataclass
class Record:
    level: str  # debug | info | warn | error | fatal | "" when the line had no level
    message: str  # the message with its key=value fields, as one string
    time: str = ""
    conn_index: int | None = None


@dataclass
class LogState:
    url: str | None = None  # the last URL announced (quick-tunnel banner or gradio share line)
    source: str = ""  # "cloudflared-banner" | "trycloudflare-url" | "gradio"
    banners: int = 0  # how many quick-tunnel URLs were announced (>1: cloudflared restarted)
    connected: set[int] = field(default_factory=set)  # connIndex values currently registered
    last_problem: Record | None = None  # newest warn/error/fatal record
    _in_banner: bool = False

    @property
    def registered(self) -> int:
        return len(self.connected)

    def hint(self) -> str:
        """One clause for a failure message: what the tunnel's own log last said."""
        parts = [f"{self.registered} registered connection(s)"]
        if self.last_problem is not None:
            when = f" at {self.last_problem.time}" if self.last_problem.time else ""
            parts.append(f"last {self.last_problem.level}{when}: {self.last_problem.message[:200]}")
        return "; ".join(parts)


def parse_record(line: str) -> Record | None:
    """One log line in either cloudflared format (or a plain line) as a Record; None when blank."""
    line = line.strip()
    if not line:
        return None
    if line.startswith("{"):
        try:
            doc = json.loads(line)
        except ValueError:
            doc = None
        if isinstance(doc, dict) and "message" in doc:
            extras = " ".join(f"{k}={doc[k]}" for k in doc if k not in ("level", "time", "message"))
            idx = doc.get("connIndex")
            return Record(
                level=str(doc.get("level", "")),
                message=f"{doc['message']} {extras}".strip(),
                time=str(doc.get("time", "")),
                conn_index=int(idx) if isinstance(idx, int) else None,
            )
    match = _CONSOLE.match(line)
    if match:
        message = match["message"]
        idx = _CONN_INDEX.search(message)
        return Record(
            level=_LEVELS.get(match["level"], match["level"].lower()),
            message=message,
            time=match["time"],
            conn_index=int(idx[1]) if idx else None,
        )
    return Record(level="", message=line)


def feed(state: LogState, line: str) -> LogState:
    """Advance `state` by one log line. Lines that mean nothing to us are ignored."""
    record = parse_record(line)
    if record is None:
        return state
    text = record.message

    gradio = _GRADIO.search(text)
    if gradio:
        state.url, state.source = gradio[1].rstrip("/"), "gradio"
        return state

    if BANNER in text:
        # The URL is on a later record of the same box; the header line itself has none.
        state._in_banner = True
        return state
    if state._in_banner:
        url = _URL.search(text)
        if url:
            state.url, state.source = url[0].rstrip("/"), "cloudflared-banner"
            state.banners += 1
            # A new tunnel: the previous process's connections are gone with it.
            state.connected.clear()
            state._in_banner = False
            return state
        if text.startswith("+-") or text.startswith("+"):
            state._in_banner = False  # closing border without a URL: malformed box, give up on it
        return state

    bare = _TRYCLOUDFLARE.search(text)
    # Only without a banner: request logs name the hostname too, and must not override the box.
    if bare and not state.banners and "api.trycloudflare.com" not in text:
        state.url, state.source = bare[0], "trycloudflare-url"
        return state

    if text.startswith("Registered tunnel connection") or (text.startswith("Connection ") and " registered" in text):
        if record.conn_index is not None:
            state.connected.add(record.conn_index)
    elif text.startswith("Unregistered tunnel connection") or text.startswith("Connection terminated"):
        if record.conn_index is not None:
            state.connected.discard(record.conn_index)

    if record.level in ("warn", "error", "fatal") or text.startswith("failed to "):
        state.last_problem = record
    return state


def parse_lines(lines) -> LogState:
    state = LogState()
    for line in lines:
        feed(state, line)
    return state


def parse_file(path: str | Path, tail_bytes: int = TAIL_BYTES) -> LogState:
    """Parse the end of a logfile. Missing file -> empty state (cloudflared may not have started)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - tail_bytes))
            data = fh.read()
    except FileNotFoundError:
        return LogState()
    lines = data.decode("utf-8", errors="replace").splitlines()
    if size > tail_bytes and lines:
        lines = lines[1:]  # the first line is cut in the middle
    return parse_lines(lines)


def url_from_hostname(hostname: str) -> str:
    """cloudflared's /quicktunnel hostname carries no scheme; cloudflared itself prefixes https://
    only when none is present (quick_tunnel.go), and so do we (the stand-in announces http://)."""
    hostname = hostname.strip().rstrip("/")
    if re.match(r"^[a-z][a-z0-9+.-]*://", hostname):
        return hostname
    return f"https://{hostname}"
