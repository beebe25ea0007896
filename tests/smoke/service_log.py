"""A compose service's log as `docker compose logs --no-color <service>` prints it, read from Docker's own log
file instead of asking the CLI every few seconds.

Why: the fault suite and the learning gate wait on the trainer's step lines, polling every 3 s for 20 min and
more. Each poll was a compose CLI start (it reads and interpolates the stack's compose files) plus the daemon
sending the whole log again, on the 2 cores the stack under test trains on. With the json-file driver
(compose.yaml's default logging) the daemon appends each line to `/var/lib/docker/containers/<id>/<id>-json.log`
as it is written, so reading the new bytes since the last poll costs next to nothing. We are root on a test
host (the CPU ledger reads the same folder). Where the file cannot be read that way (another log driver, no
root, a rotated file, the container not found), `read()` returns None and the caller asks compose as before.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

CONTAINERS = Path("/var/lib/docker/containers")


def _container(project: str, service: str) -> tuple[str, str] | None:
    """(id, compose's log prefix) of the service's container, from the daemon's own config files."""
    try:
        folders = list(CONTAINERS.iterdir())
    except OSError:
        return None
    for folder in folders:
        try:
            config = json.loads((folder / "config.v2.json").read_text())
        except (OSError, ValueError):
            continue
        labels = config.get("Config", {}).get("Labels") or {}
        if (
            labels.get("com.docker.compose.project") == project
            and labels.get("com.docker.compose.service") == service
            and labels.get("com.docker.compose.oneoff") != "True"
        ):
            return folder.name, f"{service}-{labels.get('com.docker.compose.container-number', '1')}"
    return None


@dataclass
class ServiceLog:
    project: str
    service: str
    _cid: str = ""
    _prefix: str = ""
    _offset: int = 0
    _partial: str = ""
    _lines: list[str] = field(default_factory=list)

    def read(self) -> str | None:
        """Every line the service's current container wrote, stdout and stderr in order, each prefixed as
        compose prints it ("trainer-1  | ..."); None where the file cannot be followed."""
        found = _container(self.project, self.service)
        if found is None:
            return None
        if found[0] != self._cid:  # a recreated container's log starts over, as compose's does
            self._cid, self._prefix = found
            self._offset, self._partial, self._lines = 0, "", []
        path = CONTAINERS / self._cid / f"{self._cid}-json.log"
        try:
            with path.open("rb") as f:
                if f.seek(0, 2) < self._offset:
                    return None  # rotated (compose.yaml: max-size 50m): the daemon has the rest
                f.seek(self._offset)
                new = f.read()
        except OSError:
            return None
        # Only whole json lines; a line the daemon is still writing is read next time.
        end = new.rfind(b"\n") + 1
        self._offset += end
        for raw in new[:end].splitlines():
            try:
                text = json.loads(raw)["log"]
            except (ValueError, KeyError):
                return None
            # The daemon splits a line over 16 KiB into entries without the newline; join them back.
            self._partial += text
            if self._partial.endswith("\n"):
                self._lines.append(f"{self._prefix}  | {self._partial[:-1]}")
                self._partial = ""
        return "\n".join(self._lines) + "\n" if self._lines else ""
