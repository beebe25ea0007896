"""The real OpenEnv capture proxy (openenv.core.harness.capture.server.create_app, under our own
uvicorn on 127.0.0.1, as the env server serves it), the tunnel stand-in and tunnel-check as real
processes, each on a port the kernel found free (`free_ports`), so the suite runs beside anything else.

Runs with the host venv (openenv core, no harbor):
    PYTHONPATH=services .venv/bin/python -m pytest tests/integration/tunnel
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest
from support import free_ports, wait_until

REPO = Path(__file__).resolve().parents[3]
SERVICES = REPO / "services"


# The two capture proxies, and an engine port nothing answers on (the proxies are never asked to reach it).
PROXY_A, PROXY_B, NO_ENGINE = free_ports(3)
# Process start-up on a loaded 2-core CI host has been measured at tens of seconds (imports).
START_DEADLINE_S = 90.0


class CaptureProxy:
    """OpenEnv's capture app on 127.0.0.1:<port> in a thread (CaptureServer would bind 0.0.0.0)."""

    def __init__(self, port: int):
        import uvicorn
        from openenv.core.harness.capture.server import create_app

        # No engine behind it: /health is all these tests read, and it needs none.
        self.app = create_app(llm_url=f"http://127.0.0.1:{NO_ENGINE}/v1", model="tunnel-test")
        self.instance = self.app.state.instance_id
        self.port = port
        self.server = uvicorn.Server(uvicorn.Config(self.app, host="127.0.0.1", port=port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def start(self):
        self.thread.start()
        wait_until(
            lambda: httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=2).json()["instance"] == self.instance,
            START_DEADLINE_S,
            f"capture proxy on :{self.port}",
        )
        return self

    def stop(self):
        self.server.should_exit = True
        self.thread.join(timeout=10)


def spawn(module: str, env: dict, log: Path) -> subprocess.Popen:
    full = {**os.environ, "PYTHONPATH": str(SERVICES), "PYTHONUNBUFFERED": "1", **env}
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", module], env=full, stdout=out, stderr=subprocess.STDOUT)


class Standin:
    def __init__(self, tmp: Path, port: int, metrics_port: int, capture_port: int = PROXY_A, name: str = "standin"):
        self.port, self.metrics_port = port, metrics_port
        self.url = f"http://127.0.0.1:{port}"
        self.log = tmp / f"{name}-{port}.out"
        self.tunnel_log = tmp / "cloudflared.log"
        self.proc = spawn(
            "tunnel_standin",
            {
                "CAPTURE_PORT": str(capture_port),
                "STANDIN_LISTEN_HOST": "127.0.0.1",
                "STANDIN_PORT": str(port),
                "TUNNEL_METRICS_PORT": str(metrics_port),
                "TUNNEL_LOG": str(self.tunnel_log),
            },
            self.log,
        )
        wait_until(
            lambda: self.admin_get("/quicktunnel")["hostname"] == self.url,
            START_DEADLINE_S,
            f"stand-in on :{port}",
            log=self.log,
        )

    def admin_get(self, path):
        return httpx.get(f"http://127.0.0.1:{self.metrics_port}{path}", timeout=2).json()

    def admin(self, path):
        resp = httpx.post(f"http://127.0.0.1:{self.metrics_port}/admin/{path}", timeout=5)
        resp.raise_for_status()
        return resp.json()

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


@pytest.fixture(scope="module")
def proxies():
    a, b = CaptureProxy(PROXY_A).start(), CaptureProxy(PROXY_B).start()
    yield a, b
    a.stop()
    b.stop()


@pytest.fixture(scope="session")
def kit():
    """The helpers above, as a fixture: pytest runs in importlib mode, so test modules cannot
    `import conftest`."""
    import types

    return types.SimpleNamespace(
        PROXY_A=PROXY_A,
        PROXY_B=PROXY_B,
        free_ports=free_ports,
        SERVICES=SERVICES,
        START_DEADLINE_S=START_DEADLINE_S,
        Standin=Standin,
        spawn=spawn,
    )
