"""Two capture-proxy guards with OpenEnv's real classes: the upstream pool must not cache an engine that did not
answer (OpenEnv would grade it 'text' for good, making every later rollout an eval rollout), and the proxy must
refuse to start on a port something else holds, with one line naming the setting."""

import asyncio
import socket
from pathlib import Path

import pytest
from openenv.core.harness.capture.sessions import Upstream

from env_server.capture import EngineUnreachable, LoopbackHarborService, ReprobingUpstreamPool

STARTER = str(Path(__file__).resolve().parents[3] / "datasets" / "starter")


def test_an_engine_that_was_down_is_probed_again_not_cached_as_text():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))  # bound, never listening: the engine is down
        url = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
        pool = ReprobingUpstreamPool(default_client=None, default_level="text")
        for _ in range(2):  # the second rollout probes again: nothing was cached by the first
            with pytest.raises(EngineUnreachable) as err:
                asyncio.run(pool.resolve(Upstream(llm_url=url, model="tiny")))
            assert str(err.value).startswith(f"engine {url} is not reachable: ConnectError: "), err.value
            assert pool.known() == []


def test_capture_proxy_refuses_a_held_port(tmp_path):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        svc = LoopbackHarborService(
            capture_host="127.0.0.1",
            handoff_dir=str(tmp_path / "handoff"),
            llm_url="",
            model="tiny",
            datasets=[STARTER],
            capture_port=port,
            capture_level="text",
        )
        with pytest.raises(RuntimeError) as err:
            svc.start(timeout_s=5)
        svc.stop()
    assert str(err.value) == (
        f"capture proxy cannot bind 127.0.0.1:{port} (Address already in use): stop whatever holds that port, "
        "or change CAPTURE_PORT / CAPTURE_HOST in .env"
    )


def test_capture_proxy_refuses_to_start_when_another_proxy_answers_its_health_url(tmp_path, monkeypatch):
    """The bind succeeded, yet /health answers with someone else's instance: a CAPTURE_HOST name that binds
    one address and connects to another (localhost as ::1 first on some hosts, while an older proxy holds
    that). Both proxies are OpenEnv's real capture app under our server; the one double is the health URL's
    host, pointed at the older proxy's address (127.0.0.2, another loopback address on the same port)."""
    from support import free_port

    import env_server.capture as capture

    port = free_port()

    def service(host: str, name: str) -> LoopbackHarborService:
        return LoopbackHarborService(
            capture_host=host,
            handoff_dir=str(tmp_path / name),
            llm_url="",
            model="tiny",
            datasets=[STARTER],
            capture_port=port,
            capture_level="text",
        )

    older = service("127.0.0.2", "older")
    older.start(timeout_s=15)
    ours = service("127.0.0.1", "ours")
    try:
        monkeypatch.setattr(capture, "_probe_host", lambda host: "127.0.0.2")
        with pytest.raises(RuntimeError) as err:
            ours.start(timeout_s=15)
    finally:
        ours.stop()
        older.stop()
    assert older.instance_id != ours.instance_id
    assert str(err.value) == (
        f"http://127.0.0.2:{port}/health is answered by another capture proxy (instance {older.instance_id}); "
        "stop it or change CAPTURE_PORT"
    )
