"""Where is the public URL right now? One strategy per TUNNEL_PROVIDER, asked again on every check.

Asked again every time because a quick tunnel's URL is not stable: cloudflared restarted (crash,
`docker compose restart tunnel`) comes back on a NEW trycloudflare.com hostname, and the hand-off
must follow it without anyone restarting tunnel-check.

- cloudflared, quick: the metrics server's `GET /quicktunnel` (`{"hostname": "<host>"}`, no scheme),
  which always names the running process's tunnel; the `--logfile` banner only when the metrics
  server cannot be reached (its last banner may be a dead process's, which verification then rejects).
- cloudflared, named: `https://$TUNNEL_HOSTNAME`, fixed by DNS.
- gradio: OpenEnv's own GradioForwarder, run here (there is no separate tunnel container); it
  returns the share URL. `renew()` tears it down and opens a new share link after a withdrawal.
- direct: `DIRECT_URL`, for sandboxes that can already route to the proxy.
"""

from __future__ import annotations

import logging

import httpx

from stack.backends import TUNNEL_PROVIDERS
from stack.readers.tunnel_check import Settings

from . import logparse, probe

log = logging.getLogger("tunnel_check")

_GRADIO_NEEDS = (
    " (gradio share needs outbound HTTPS to api.gradio.app and its share server, or your own frps in "
    "GRADIO_SHARE_SERVER)"
)


class Discovery:
    def __init__(self, settings: Settings, client: httpx.Client | None = None):
        self.s = settings
        self.http = client or probe.new_client()
        self._forwarder = None  # GradioForwarder, gradio provider only

    # -- the URL ----------------------------------------------------------------------------------
    def current(self, timeout_s: float) -> tuple[str | None, probe.Verdict | None]:
        """The provider's own strategy, as its registry entry names it (stack/backends.py)."""
        return getattr(self, "_" + TUNNEL_PROVIDERS.get(self.s.provider).discovery)(timeout_s)

    def _direct(self, timeout_s: float) -> tuple[str | None, probe.Verdict | None]:
        return self.s.direct_url, None

    def _cloudflared(self, timeout_s: float) -> tuple[str | None, probe.Verdict | None]:
        if self.s.named:
            return f"https://{self.s.tunnel_hostname}", None
        return self._quick(timeout_s)

    def _quick(self, timeout_s: float) -> tuple[str | None, probe.Verdict | None]:
        s = self.s
        tried = []
        if s.metrics_port is not None:
            metrics = f"http://{s.metrics_host}:{s.metrics_port}/quicktunnel"
            try:
                resp = self.http.get(metrics, timeout=timeout_s)
                hostname = resp.json().get("hostname", "") if resp.status_code == 200 else ""
                if hostname:
                    return logparse.url_from_hostname(hostname), None
                tried.append(f"{metrics} -> HTTP {resp.status_code} without a hostname")
            except (httpx.HTTPError, ValueError, AttributeError) as exc:
                tried.append(f"{metrics} unreachable ({type(exc).__name__}: {exc})")
        if s.tunnel_log:
            state = logparse.parse_file(s.tunnel_log)
            if state.url:
                return state.url, None
            tried.append(f"{s.tunnel_log} has no quick-tunnel banner yet")
        return None, probe.fail(
            probe.NO_URL,
            "; ".join(tried) + " -- is the tunnel service running (docker compose logs tunnel)?",
        )

    def _gradio(self, timeout_s: float = 0.0) -> tuple[str | None, probe.Verdict | None]:
        if self._forwarder is not None and self._forwarder.url:
            return self._forwarder.url, None
        try:
            from openenv.core.harness.capture.forwarding import ForwardingError, GradioForwarder
        except ImportError as exc:
            return None, probe.fail(
                probe.NO_URL, f"TUNNEL_PROVIDER=gradio needs openenv (with gradio) in this image: {exc}"
            )
        try:
            GradioForwarder.preflight()
            forwarder = GradioForwarder(share_server_address=self.s.gradio_share_server or None)
            url = forwarder.start(self.s.capture_port, local_host=self.s.capture_host)
        except ForwardingError as exc:
            return None, probe.fail(probe.NO_URL, f"gradio share link did not open: {exc}{_GRADIO_NEEDS}")
        except Exception as exc:  # noqa: BLE001 -- gradio raises whatever its HTTP/frpc layers raise
            return None, probe.fail(
                probe.NO_URL, f"gradio share link did not open: {type(exc).__name__}: {exc}{_GRADIO_NEEDS}"
            )
        self._forwarder = forwarder
        log.info("gradio share link opened: %s", url)
        return url.rstrip("/"), None

    # -- after a withdrawal -----------------------------------------------------------------------
    def renew(self) -> None:
        """Drop a forwarder we own so the next check opens a fresh one (gradio only; cloudflared is
        restarted by its own container's restart policy and re-discovered, not by us)."""
        if self._forwarder is not None:
            log.info("closing gradio share link %s to open a new one", self._forwarder.url)
            self._forwarder.stop()
            self._forwarder = None

    def close(self) -> None:
        self.renew()

    # -- context for a failure message ------------------------------------------------------------
    def hint(self, timeout_s: float) -> str:
        """What the tunnel says about itself, for a failed check's message ('' when nothing)."""
        s = self.s
        if not s.tunnel.reports_through_metrics_or_log:
            return ""
        parts = []
        if s.metrics_port is not None:
            ready = f"http://{s.metrics_host}:{s.metrics_port}/ready"
            try:
                resp = self.http.get(ready, timeout=timeout_s)
                parts.append(f"cloudflared /ready -> {resp.status_code} {resp.text.strip()[:80]}")
            except httpx.HTTPError as exc:
                parts.append(f"cloudflared metrics unreachable ({type(exc).__name__})")
        if s.tunnel_log:
            state = logparse.parse_file(s.tunnel_log)
            if state.banners or state.registered or state.last_problem:
                parts.append(f"cloudflared log: {state.hint()}")
        return "; ".join(parts)
