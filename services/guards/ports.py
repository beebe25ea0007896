"""Who holds a port the stack needs: this stack's own running service, or a stranger?

Preflight is a dependency of every service, so `docker compose up -d env-server` after the env server
died re-runs it while the engine and the tunnel still hold their ports. Counted as taken ("port 8001
(ENGINE_PORT) is already in use"), they would keep the env server down, and block restarting the trainer
alone (measured).

A port is ours when the service that binds it runs in THIS compose project. Preflight learns its project
from its own container's labels, asked of the Docker daemon; it finds its own container id in
/proc/self/mountinfo (Docker bind-mounts /etc/hostname from /var/lib/docker/containers/<id>/), because on
the host network the hostname is the host's. Without the Docker socket nothing can be told apart, and a
held port is reported as before, saying so.
"""

from __future__ import annotations

import http.client
import json
import socket
import urllib.parse
from dataclasses import dataclass, field

from stack import mountinfo

PROJECT_LABEL = "com.docker.compose.project"
SERVICE_LABEL = "com.docker.compose.service"
# Which service of the stack binds each port.
PORT_SERVICES = {
    "ENGINE_PORT": "engine",
    "ENV_SERVER_PORT": "env-server",
    "CAPTURE_PORT": "env-server",
    "TUNNEL_METRICS_PORT": "tunnel",
}


@dataclass
class Owners:
    project: str | None  # None: could not be learned (then `why` says why)
    running: set[str] = field(default_factory=set)  # services of that project running now
    why: str = ""


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float):
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self._path)


def docker_get(socket_path: str, path: str, timeout_s: float = 5.0):
    conn = _UnixConnection(socket_path, timeout_s)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        body = resp.read()
        if resp.status != 200:
            raise OSError(f"Docker API {path} -> HTTP {resp.status}")
        return json.loads(body)
    finally:
        conn.close()


def own_container_id(mountinfo_path: str = mountinfo.MOUNTINFO) -> str | None:
    return mountinfo.container_id(mountinfo.read(mountinfo_path)) or None


def stack_owners(socket_path: str, mountinfo_path: str = mountinfo.MOUNTINFO) -> Owners:
    try:
        cid = own_container_id(mountinfo_path)
    except OSError as exc:
        return Owners(None, why=f"cannot read {mountinfo_path} ({exc})")
    if cid is None:
        return Owners(None, why="preflight is not running in a Docker container")
    try:
        project = (docker_get(socket_path, f"/containers/{cid}/json").get("Config", {}).get("Labels") or {}).get(
            PROJECT_LABEL
        )
        if not project:
            return Owners(None, why="preflight's container has no compose project label")
        filters = urllib.parse.quote(json.dumps({"label": [f"{PROJECT_LABEL}={project}"], "status": ["running"]}))
        rows = docker_get(socket_path, f"/containers/json?filters={filters}")
    except (OSError, ValueError) as exc:
        return Owners(None, why=f"the Docker socket {socket_path} did not answer ({exc})")
    running = {(row.get("Labels") or {}).get(SERVICE_LABEL, "") for row in rows} - {""}
    return Owners(project, running)
