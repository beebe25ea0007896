"""The advertised capture URL is the hand-off's, read per rollout; no rollout starts without one.

Real parts: OpenEnv's HarborService/capture app (a real proxy on a loopback port), OpenEnv's
HarborEnvironment with our gate, the real hand-off module, a real HTTP listener answering `/v1/models`
as the engine's reachability endpoint. Test double: Harbor's trial (`openenv.harbor.rollout.run_rollout`)
is replaced by a recorder, because Harbor is not installed on the host (Python 3.12 venv, no sandbox
backend); tests/integration/env_server runs the real trial in a docker sandbox.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from support import free_port

from env_server.capture import LoopbackHarborService
from env_server.rollouts import GatedHarborEnvironment, Inflight
from stack import handoff
from stack.endpoints import openai_base
from stack.readers.env_server import Settings

REPO = Path(__file__).resolve().parents[3]
STARTER = str(REPO / "datasets" / "starter")


class _Models(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        body = json.dumps({"data": [{"id": "tiny"}]}).encode()
        self.send_response(200 if self.path.endswith("/models") else 404)
        self.send_header("content-type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_):
        pass


@pytest.fixture
def engine_url():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Models)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"  # the root, as ENGINE_URL is everywhere
    server.shutdown()


@pytest.fixture
def service(tmp_path):
    svc = LoopbackHarborService(
        capture_host="127.0.0.1",
        handoff_dir=str(tmp_path / "handoff"),
        llm_url="",
        model="tiny",
        datasets=[STARTER],
        capture_port=free_port(),
        capture_level="text",
    )
    svc.start()
    from openenv.harbor.serving import HarborService

    HarborService.set_current(svc)
    yield svc
    svc.stop()


@pytest.fixture
def recorder(monkeypatch):
    calls: list[dict] = []

    async def fake_run_rollout(**kwargs):
        from openenv.harbor.models import HarborRolloutResult

        calls.append(kwargs)
        return HarborRolloutResult(ok=True, harness=kwargs["harness"], sandbox=kwargs["sandbox"])

    import openenv.harbor.rollout as rollout_module

    monkeypatch.setattr(rollout_module, "run_rollout", fake_run_rollout)
    return calls


def make_env(service, engine_url: str) -> GatedHarborEnvironment:
    settings = Settings(sandbox="docker", engine_url=engine_url, datasets=(STARTER,), handoff_dir=service.handoff_dir)
    GatedHarborEnvironment.configure_stack(settings, model="tiny", llm={}, inflight=Inflight())
    return GatedHarborEnvironment()


def publish(service, url: str, instance: str | None = None, valid_for_s: float = 30.0) -> None:
    handoff.publish(url, instance or service.instance_id, "test", valid_for_s, service.handoff_dir)


NOT_STARTED = (
    "): no public URL for the capture proxy, so a sandbox could not reach it; rollout not started. Wait for "
    "tunnel-check to verify the URL (docker compose logs tunnel-check)"
)


def rollout(env, **kw) -> dict:
    args = dict(
        split=STARTER,
        task_index=0,
        harness="mini-swe-agent",
        sandbox="docker",
        reward_key="",
        keep_sandbox=False,
        force_build=False,
    )
    args.update(kw)
    return json.loads(asyncio.run(env._run_rollout(**args)))


def test_capture_proxy_answers_on_loopback_with_its_instance(service):
    doc = httpx.get(f"http://127.0.0.1:{service.port}/health", timeout=5).json()
    assert doc["instance"] == service.instance_id


def test_capture_proxy_is_not_on_other_interfaces(service):
    # OpenEnv's own CaptureServer would bind 0.0.0.0; ours binds CAPTURE_HOST only.
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 1))
            other = s.getsockname()[0]
        except OSError:
            pytest.skip("no non-loopback IPv4 address on this host")
    if other.startswith("127."):
        pytest.skip("no non-loopback IPv4 address on this host")
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://{other}:{service.port}/health", timeout=3)


def test_no_rollout_before_a_url_is_verified(service, engine_url, recorder):
    env = make_env(service, engine_url)
    result = rollout(env)
    assert result["ok"] is False and result["reward"] is None
    assert result["error"] == (
        "tunnel not verified yet (no URL verified yet (tunnel-check has published nothing)" + NOT_STARTED
    )
    assert recorder == []  # nothing was started: no session, no sandbox
    assert service.capture.registry.list_ids() == []


def test_advertised_url_follows_the_handoff_without_restart(service, engine_url, recorder):
    env = make_env(service, engine_url)
    publish(service, "https://first-quick-tunnel.example")
    assert rollout(env)["ok"] is True
    publish(service, "https://second-quick-tunnel.example")
    assert rollout(env)["ok"] is True
    assert [c["intercept_url"] for c in recorder] == [
        "https://first-quick-tunnel.example",
        "https://second-quick-tunnel.example",
    ]
    # The engine this server was told about is named on every rollout, so the proxy's pool probes it.
    assert all(c["upstream"].llm_url == openai_base(engine_url) for c in recorder)

    handoff.withdraw("502 through the tunnel", service.handoff_dir)
    refused = rollout(env)
    assert refused["ok"] is False
    assert refused["error"] == "tunnel not verified yet (withdrawn: 502 through the tunnel" + NOT_STARTED
    assert len(recorder) == 2


def test_unreachable_engine_refuses_the_rollout_by_name(service, recorder):
    dead = f"http://127.0.0.1:{free_port()}"
    env = make_env(service, dead)
    publish(service, "https://quick.example")
    result = rollout(env)
    assert result["ok"] is False
    assert result["error"].startswith(f"engine {dead}/v1 is not reachable")
    assert recorder == []


def test_a_rollout_for_another_backend_is_refused(service, engine_url, recorder):
    env = make_env(service, engine_url)
    publish(service, "https://quick.example")
    result = rollout(env, sandbox="e2b")
    assert result["ok"] is False
    assert result["error"] == (
        "rollout asked for sandbox 'e2b' but this env server runs SANDBOX=docker (the backend its startup checks "
        "covered): pass sandbox='docker', or change SANDBOX and restart env-server"
    )
    assert recorder == []


def test_a_url_verified_for_another_proxy_instance_is_not_used(service, engine_url, recorder):
    env = make_env(service, engine_url)
    publish(service, "https://quick.example", "instance-of-a-previous-env-server")
    result = rollout(env)
    assert result["ok"] is False
    assert result["error"] == (
        "tunnel URL https://quick.example was verified for capture proxy instance instance-of-a-previous-env-server, "
        f"not this one ({service.instance_id}); rollout not started. tunnel-check re-verifies it within "
        "TUNNEL_CHECK_INTERVAL_S"
    )
    assert recorder == []


def test_an_expired_record_refuses_the_rollout_with_its_reason(service, engine_url, recorder):
    """tunnel-check SIGKILLed: its last record stays "verified" but its valid_until passes."""
    env = make_env(service, engine_url)
    publish(service, "https://quick.example", valid_for_s=0.2)
    assert rollout(env)["ok"] is True
    import time

    time.sleep(0.5)
    refused = rollout(env)
    assert refused["ok"] is False
    assert refused["error"].startswith("tunnel not verified yet (https://quick.example was last verified ")
    assert "its record expired" in refused["error"] and len(recorder) == 1
    assert service.public_url == ""


def test_a_verified_record_left_by_a_killed_tunnel_check_is_refused_with_its_ages(service, engine_url, recorder):
    """Still "verified" on disk, but past its own valid_until: the exact line, with the record's ages."""
    import time

    from stack.facts import HANDOFF_FILE

    env = make_env(service, engine_url)
    publish(service, "https://quick.example")
    path = Path(service.handoff_dir) / HANDOFF_FILE
    doc = json.loads(path.read_text())
    doc["verified_at"], doc["valid_until"] = time.time() - 60, time.time() - 31
    path.write_text(json.dumps(doc))
    refused = rollout(env)
    assert (refused["ok"], refused["reward"]) == (False, None)
    assert refused["error"] == (
        "tunnel not verified yet (https://quick.example was last verified 60s ago and its record expired 31s ago: "
        "tunnel-check has stopped re-checking it (docker compose logs tunnel-check)" + NOT_STARTED
    )
    assert recorder == [] and service.capture.registry.list_ids() == []
