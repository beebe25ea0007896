"""Log lines in cloudflared's two formats, so tunnel-check's parser reads the stand-in as it reads
cloudflared: the console format (`<RFC3339> INF <message> key=value`) on stdout, and zerolog JSON
(`{"level":"info",<fields>,"time":...,"message":...}`) appended to the --logfile equivalent.

The quick-tunnel banner is cloudflared's ASCII box, one record per line, URL on the line after
"Your quick Tunnel has been created!" (cloudflared cmd/cloudflared/tunnel/quick_tunnel.go).
"""

from __future__ import annotations

import json
import sys
import threading
from datetime import UTC, datetime

_LEVEL = {"debug": "DBG", "info": "INF", "warn": "WRN", "error": "ERR", "fatal": "FTL"}
_lock = threading.Lock()


class Announcer:
    def __init__(self, logfile: str | None = None, stream=None):
        self.logfile = logfile or None
        self.stream = stream or sys.stdout

    def log(self, level: str, message: str, **fields) -> None:
        now = datetime.now(UTC)
        console_time = now.strftime("%Y-%m-%dT%H:%M:%SZ")
        kv = " ".join(f"{k}={json.dumps(v) if isinstance(v, str) and ' ' in v else v}" for k, v in fields.items())
        line = f"{console_time} {_LEVEL[level]} {message}" + (f" {kv}" if kv else "")
        doc = {"level": level, **fields, "time": now.isoformat().replace("+00:00", "Z"), "message": message}
        with _lock:
            print(line, file=self.stream, flush=True)
            if self.logfile:
                # Appended, like cloudflared's --logfile: a restart adds a new banner after the old.
                with open(self.logfile, "a") as fh:
                    fh.write(json.dumps(doc, separators=(",", ":")) + "\n")

    def banner(self, url: str) -> None:
        lines = ["Your quick Tunnel has been created! Visit it at (it may take some time to be reachable):", url]
        width = max(len(x) for x in lines)
        border = "+" + "-" * (width + 4) + "+"
        self.log("info", border)
        for text in lines:
            self.log("info", "|  " + text.ljust(width) + "  |")
        self.log("info", border)
