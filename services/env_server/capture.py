"""OpenEnv's HarborService, with the capture proxy on an address we bind and a URL the hand-off verified.

Changes to OpenEnv 0.10.0's service, everything else (the capture app, the session registry, the
admin key, the upstream pool) is OpenEnv's own:

1. Binding. `CaptureServer.start()` binds the proxy to 0.0.0.0 unconditionally; on the host network
   that publishes it on every interface. Here OpenEnv's capture app (`self.capture.app`) is served by
   a uvicorn server bound to CAPTURE_HOST (127.0.0.1 by default), in a thread as OpenEnv does it.
2. The advertised URL. OpenEnv's forwarders (gradio/cloudflare/direct) decide the public URL once, at
   boot. Here `public_url` is read from the tunnel hand-off each time a rollout starts, so a new
   quick-tunnel URL reaches the next sandbox without a restart, and no URL means no rollout.
3. The public surface. The app is served behind `front.PublicFront` (route allow-list, key before body,
   body cap and deadline, concurrency ceiling, a health document that shows only the instance, the
   per-turn output bound), on uvicorn's h11 protocol with a header deadline and a connection ceiling
   (`conn_guard.py`), and its engine clients learn no parameter fixes from live traffic (`frozen_fixes.py`).
"""

from __future__ import annotations

import contextvars
import socket
import threading
import time
from typing import Any

import httpx
from openenv.core.harness.capture.server import UpstreamPool
from openenv.harbor.serving import HarborService

from stack import handoff

from . import frozen_fixes
from .checks import engine_reachable
from .conn_guard import HEADER_TIMEOUT_S, MAX_HEADER_BYTES, guarded_protocol
from .front import BODY_TIMEOUT_S, PublicFront

# The URL a rollout was admitted with. OpenEnv reads `service.public_url` again when it builds the
# trial; pinning it per rollout means a URL withdrawn in between cannot turn into an empty one.
pinned_url: contextvars.ContextVar[str | None] = contextvars.ContextVar("pinned_url", default=None)


class EngineUnreachable(RuntimeError):
    pass


class ReprobingUpstreamPool(UpstreamPool):
    """OpenEnv's per-engine pool, except that an engine that does not answer is not cached.

    OpenEnv's `_probe` grades an unreachable engine `text` and the pool keeps that forever, so an
    engine that was still loading when the first rollout came would make every later rollout an eval
    rollout. Raising instead leaves nothing cached: the next rollout probes again.
    """

    def _probe(self, upstream: Any) -> tuple[str, str]:
        ok, why, _ = engine_reachable(upstream.llm_url)
        if not ok:
            raise EngineUnreachable(f"engine {upstream.llm_url} is not reachable: {why}")
        return super()._probe(upstream)


def _probe_host(host: str) -> str:
    return "127.0.0.1" if host in ("0.0.0.0", "") else host


class LoopbackHarborService(HarborService):
    def __init__(
        self,
        *,
        capture_host: str,
        handoff_dir: str,
        max_body_bytes: int = 8 * 1024 * 1024,
        max_concurrent: int = 64,
        header_timeout_s: float = HEADER_TIMEOUT_S,
        body_timeout_s: float = BODY_TIMEOUT_S,
        max_connections: int | None = None,
        **kwargs: Any,
    ) -> None:
        # Before OpenEnv's service creates the capture app: the app builds its engine clients then.
        frozen_fixes.freeze()
        # `expose` is unused: no OpenEnv forwarder runs; the tunnel service publishes the port.
        super().__init__(expose="direct", **kwargs)
        self.capture_host = capture_host
        self.handoff_dir = handoff_dir
        app = self.capture.app
        app.state.upstreams = ReprobingUpstreamPool(
            default_client=app.state.inference, default_level=app.state.capture_level
        )
        registry = app.state.registry
        self.front = PublicFront(
            app,
            instance_id=app.state.instance_id,
            is_session=lambda key: registry.get(key) is not None,
            admin_key=self.admin_key,
            max_body_bytes=max_body_bytes,
            max_concurrent=max_concurrent,
            max_output_tokens=kwargs.get("max_output_tokens"),
            body_timeout_s=body_timeout_s,
        )
        self.header_timeout_s = header_timeout_s
        # Room for every model call in flight, their keep-alives, /health checks and the tunnel's pool
        # (measured: a burst of 200 unauthenticated calls and a rollout's, all answered, under 256).
        self.max_connections = max_connections or max(256, 4 * max_concurrent)
        self._server: Any = None
        self._thread: threading.Thread | None = None

    # HarborService.__init__ assigns `self.public_url = ""`; the setter accepts and ignores it.
    @property
    def public_url(self) -> str:
        pinned = pinned_url.get()
        if pinned is not None:
            return pinned
        verified, _why = handoff.lookup(self.handoff_dir)
        return verified.url if verified else ""

    @public_url.setter
    def public_url(self, _value: str) -> None:
        pass

    @property
    def instance_id(self) -> str:
        return self.capture.app.state.instance_id

    @property
    def port(self) -> int:
        return self.capture.port

    def start(self, timeout_s: float = 30.0) -> str:
        """Serve the capture app on CAPTURE_HOST:CAPTURE_PORT and confirm /health reports OUR instance."""
        import uvicorn

        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            # As uvicorn binds: with SO_REUSEADDR. Without it the connections the previous env server
            # accepted (TIME_WAIT for up to a minute after a stop) made a prompt restart fail with
            # "Address already in use" although nothing listened there (measured in the integration run).
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((self.capture_host, self.port))
            except OSError as exc:
                raise RuntimeError(
                    f"capture proxy cannot bind {self.capture_host}:{self.port} ({exc.strerror}): stop "
                    "whatever holds that port, or change CAPTURE_PORT / CAPTURE_HOST in .env"
                ) from None
        config = uvicorn.Config(
            self.front,
            host=self.capture_host,
            port=self.port,
            log_level="warning",
            http=guarded_protocol(
                header_timeout_s=self.header_timeout_s,
                max_connections=self.max_connections,
                refused=self.front.refused,
            ),
            h11_max_incomplete_event_size=MAX_HEADER_BYTES,
            # uvicorn's own idle timeout between requests (its default, stated).
            timeout_keep_alive=5,
            # A backstop on requests being served at once (uvicorn answers 503 past it); the ceiling
            # that sheds slow connections is conn_guard's, which lets complete requests through.
            limit_concurrency=self.max_connections + 16,
        )
        self._server = uvicorn.Server(config)
        # Off the main thread uvicorn installs no signal handlers: the Task API server owns SIGTERM
        # and stops this one after the in-flight sandboxes are closed.
        self._thread = threading.Thread(target=self._server.run, name="capture-proxy", daemon=True)
        self._thread.start()

        url = f"http://{_probe_host(self.capture_host)}:{self.port}/health"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self._thread.is_alive():
                raise RuntimeError(f"capture proxy exited while starting on {self.capture_host}:{self.port}")
            try:
                got = httpx.get(url, timeout=2.0).json().get("instance")
            except (httpx.HTTPError, ValueError):
                got = None
            if got == self.instance_id:
                return f"http://{self.capture_host}:{self.port}"
            if got is not None:
                raise RuntimeError(
                    f"{url} is answered by another capture proxy (instance {got}); stop it or change CAPTURE_PORT"
                )
            time.sleep(0.1)
        raise RuntimeError(f"capture proxy did not answer on {url} within {timeout_s:.0f}s")

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
