"""tunnel-check's settings, read from the environment once, each bad value a one-line error.

The two bounds an operator relies on are derived here and nowhere else, so the startup banner, the
monitor loop and the healthcheck cannot disagree:

    withdraw bound  = interval x failures + timeout
        Checks start on a fixed schedule, `interval` apart, and one check (local /health, discovery
        and the request through the URL together) never outlasts `timeout` < `interval`. A URL that
        stops serving this proxy at time T fails the check that starts at the latest at T+interval;
        the `failures`-th consecutive one starts by T + failures x interval and ends within `timeout`.
    freshness bound = the same number
        A healthy monitor re-verifies every `interval`, so a published document older than the
        withdraw bound means the monitor itself stalled: the healthcheck fails on it.
"""

from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

PROVIDERS = ("cloudflared", "gradio", "direct")


class ConfigError(ValueError):
    """A setting is missing or wrong. The message is the one line the operator reads."""


def _float(env, name: str, default: float, minimum: float) -> float:
    raw = env.get(name, "") or str(default)
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a number; set it to seconds, e.g. {default}") from None
    if value < minimum:
        raise ConfigError(f"{name}={raw} is below {minimum}; set it to at least {minimum}")
    return value


def _int(env, name: str, default: int, minimum: int) -> int:
    raw = env.get(name, "") or str(default)
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not an integer; e.g. {default}") from None
    if value < minimum:
        raise ConfigError(f"{name}={raw} is below {minimum}; set it to at least {minimum}")
    return value


def _port(env, name: str, default: int | None) -> int | None:
    raw = env.get(name, "")
    if not raw:
        return default
    if not raw.isdigit() or not 0 < int(raw) < 65536:
        raise ConfigError(f"{name}={raw!r} is not a TCP port (1-65535)")
    return int(raw)


_HOST_LABEL = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")


def _hostname_problem(host: str) -> str | None:
    """Why `host` cannot be a DNS name or address (None when it can). Checked at start: the same value
    would otherwise raise inside every check of the loop (httpx.InvalidURL), forever."""
    if not host:
        return "it has no host"
    if ":" in host.strip("[]"):
        try:
            ipaddress.IPv6Address(host.strip("[]"))
            return None
        except ValueError:
            return f"{host!r} is not an IPv6 address"
    labels = host.rstrip(".").split(".")
    bad = [label for label in labels if not _HOST_LABEL.match(label)]
    return f"{bad[0]!r} is not a valid hostname label" if bad else None


def _check_url(name: str, url: str) -> None:
    try:
        parts = urlsplit(url)
        port = parts.port  # raises ValueError on a port that is not 1-65535
    except ValueError as exc:
        raise ConfigError(f"{name}={url!r} is not a usable URL ({exc}): e.g. http://172.17.0.1:8100") from None
    if parts.scheme not in ("http", "https"):
        raise ConfigError(f"{name}={url!r} needs an http:// or https:// scheme, e.g. http://172.17.0.1:8100")
    why = _hostname_problem(parts.hostname or "")
    if why or port == 0:
        raise ConfigError(f"{name}={url!r} is not a usable URL ({why or 'port 0'}): e.g. http://172.17.0.1:8100")
    if parts.query or parts.fragment or parts.username:
        raise ConfigError(f"{name}={url!r} carries a query, fragment or credentials: give only scheme://host:port")


@dataclass(frozen=True)
class Settings:
    provider: str
    capture_host: str
    capture_port: int
    metrics_host: str
    metrics_port: int | None
    tunnel_log: str
    tunnel_hostname: str
    direct_url: str
    gradio_share_server: str
    interval_s: float
    failures_to_withdraw: int
    timeout_s: float
    handoff_dir: str | None

    @property
    def named(self) -> bool:
        return self.provider == "cloudflared" and bool(self.tunnel_hostname)

    @property
    def mode(self) -> str:
        """The provider as the hand-off records it: cloudflared-quick, cloudflared-named, gradio, direct."""
        if self.provider == "cloudflared":
            return "cloudflared-named" if self.named else "cloudflared-quick"
        return self.provider

    @property
    def withdraw_bound_s(self) -> float:
        return self.interval_s * self.failures_to_withdraw + self.timeout_s

    @property
    def freshness_bound_s(self) -> float:
        return self.withdraw_bound_s

    @property
    def local_health_url(self) -> str:
        return f"http://{self.capture_host}:{self.capture_port}/health"

    def describe(self) -> str:
        return (
            f"provider={self.mode} capture=http://{self.capture_host}:{self.capture_port} "
            f"interval={self.interval_s:g}s failures_to_withdraw={self.failures_to_withdraw} "
            f"timeout={self.timeout_s:g}s -> a URL that stops serving this proxy is withdrawn within "
            f"{self.withdraw_bound_s:g}s (interval x failures + timeout); healthcheck freshness bound "
            f"{self.freshness_bound_s:g}s"
        )


def load(env: dict | None = None) -> Settings:
    env = os.environ if env is None else env
    provider = (env.get("TUNNEL_PROVIDER", "") or "cloudflared").strip().lower()
    if provider == "cloudflare":
        provider = "cloudflared"  # OpenEnv's make_forwarder spells it this way
    if provider not in PROVIDERS:
        raise ConfigError(
            f"TUNNEL_PROVIDER={provider!r} is not one of {', '.join(PROVIDERS)}; "
            "cloudflared (quick, or named with TUNNEL_TOKEN + TUNNEL_HOSTNAME), gradio (share link) "
            "or direct (DIRECT_URL the sandbox can already route to)"
        )
    capture_port = _port(env, "CAPTURE_PORT", 8100)
    hostname = env.get("TUNNEL_HOSTNAME", "").strip()
    if hostname.startswith(("http://", "https://")):
        raise ConfigError(
            f"TUNNEL_HOSTNAME={hostname!r} must be a bare hostname (e.g. capture.example.com): "
            "a named tunnel is always served as https://<hostname>"
        )
    hostname = hostname.rstrip("/")
    if hostname and (why := _hostname_problem(hostname.split(":")[0])):
        raise ConfigError(f"TUNNEL_HOSTNAME={hostname!r} is not a hostname ({why}): e.g. capture.example.com")
    # Compose passes TUNNEL_NAMED=${TUNNEL_TOKEN:+1} so this service can tell a named tunnel is
    # configured without ever holding the token.
    named_flag = env.get("TUNNEL_NAMED")
    if provider == "cloudflared" and named_flag is not None:
        if named_flag and not hostname:
            raise ConfigError(
                "TUNNEL_TOKEN is set (named tunnel) but TUNNEL_HOSTNAME is empty: set TUNNEL_HOSTNAME "
                "to the public hostname routed to this tunnel; it is the URL tunnel-check verifies"
            )
        if hostname and not named_flag:
            raise ConfigError(
                f"TUNNEL_HOSTNAME={hostname} is set but TUNNEL_TOKEN is empty: a quick tunnel gets a "
                "random trycloudflare.com hostname; set TUNNEL_TOKEN for the named tunnel or unset "
                "TUNNEL_HOSTNAME"
            )
    direct_url = env.get("DIRECT_URL", "").strip().rstrip("/")
    if provider == "direct":
        if not direct_url:
            raise ConfigError(
                "TUNNEL_PROVIDER=direct needs DIRECT_URL: the capture proxy's URL as the sandbox "
                "reaches it (e.g. http://172.17.0.1:8100 for local docker sandboxes)"
            )
        if not direct_url.startswith(("http://", "https://")):
            raise ConfigError(f"DIRECT_URL={direct_url!r} needs a scheme, e.g. http://{direct_url}")
        _check_url("DIRECT_URL", direct_url)
    metrics_port = _port(env, "TUNNEL_METRICS_PORT", None)
    tunnel_log = env.get("TUNNEL_LOG", "").strip()
    if provider == "cloudflared" and not hostname and metrics_port is None and not tunnel_log:
        raise ConfigError(
            "a quick tunnel's URL is found through TUNNEL_METRICS_PORT (cloudflared --metrics) or "
            "TUNNEL_LOG (cloudflared --logfile); set at least one"
        )
    interval = _float(env, "TUNNEL_CHECK_INTERVAL_S", 10.0, 0.2)
    failures = _int(env, "TUNNEL_CHECK_FAILURES_TO_WITHDRAW", 2, 1)
    timeout = _float(env, "TUNNEL_CHECK_TIMEOUT_S", min(8.0, interval * 0.8), 0.1)
    if timeout >= interval:
        raise ConfigError(
            f"TUNNEL_CHECK_TIMEOUT_S={timeout:g} must be below TUNNEL_CHECK_INTERVAL_S={interval:g}: "
            "checks run on a fixed schedule and one must end before the next starts, or the "
            "withdraw bound no longer holds"
        )
    capture_host = env.get("CAPTURE_HOST", "") or "127.0.0.1"
    _check_url("CAPTURE_HOST", f"http://{capture_host}:{capture_port}")
    gradio_server = env.get("GRADIO_SHARE_SERVER", "").strip()
    if gradio_server:
        host, _, port = gradio_server.rpartition(":")
        if not port.isdigit() or not 0 < int(port) < 65536 or _hostname_problem(host):
            raise ConfigError(
                f"GRADIO_SHARE_SERVER={gradio_server!r} is not host:port (your frps), e.g. frps.example.com:7000"
            )
    return Settings(
        provider=provider,
        capture_host=capture_host,
        capture_port=capture_port,
        metrics_host=env.get("TUNNEL_METRICS_HOST", "") or "127.0.0.1",
        metrics_port=metrics_port,
        tunnel_log=tunnel_log,
        tunnel_hostname=hostname,
        direct_url=direct_url,
        gradio_share_server=gradio_server,
        interval_s=interval,
        failures_to_withdraw=failures,
        timeout_s=timeout,
        handoff_dir=env.get("HANDOFF_DIR") or None,
    )
