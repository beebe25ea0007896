"""tunnel-check's settings, read from the environment once, each bad value a one-line error.

tunnel-check's schedule is known here and nowhere else; what other services need of it travels in
the hand-off record (`valid_until`), so no reader re-derives it:

    withdraw bound  = interval x failures + timeout
        Checks start on a fixed schedule, `interval` apart, and one check (local /health, discovery
        and the request through the URL together) never outlasts `timeout` < `interval`. A URL that
        stops serving this proxy at time T fails the check that starts at the latest at T+interval;
        the `failures`-th consecutive one starts by T + failures x interval and ends within `timeout`.
    validity        = withdraw bound + WRITE_GRACE_S
        Each published record is valid until `verified_at` + this. A running monitor rewrites it
        every `interval` or withdraws it within the withdraw bound, so a record that expires means
        the monitor itself stalled or died: readers (env-server, the healthcheck, status) stop
        trusting the URL at that moment.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, make_dataclass
from urllib.parse import urlsplit

from stack import fields
from stack.backends import TUNNEL_PROVIDERS, TunnelProvider
from stack.env import _UNSET, Env, EnvError, Field, Table

# A record is written right after the check's request returns; allow for that write (and for a check
# that ends exactly at its timeout when failures_to_withdraw is 1) before the record expires.
WRITE_GRACE_S = 1.0
# The longest a URL that stopped serving may stay published (interval x failures + timeout). The defaults give
# 28 s; a flaky network's 30 s x 5 gives under 3 minutes; past half an hour every rollout started meanwhile is
# sent to a dead URL and comes back unscorable.
MAX_WITHDRAW_BOUND_S = 1800.0


F = fields
FIELDS = Table(
    F.TUNNEL_PROVIDER,
    F.CAPTURE_PORT,
    F.CAPTURE_HOST,
    Field("TUNNEL_HOSTNAME", "text", "", "public hostname routed to the capture port by a named tunnel"),
    # Compose passes TUNNEL_NAMED=${TUNNEL_TOKEN:+1} so this service can tell a named tunnel is configured
    # without ever holding the token. Unset (not compose) means "not said".
    Field("TUNNEL_NAMED", "text", None, "set by compose: 1 when TUNNEL_TOKEN is set (never the token)"),
    F.DIRECT_URL,
    F.TUNNEL_METRICS_PORT,
    F.TUNNEL_LOG,
    Field("TUNNEL_METRICS_HOST", "text", "127.0.0.1", "where cloudflared's metrics server listens"),
    # The withdraw bound (interval x failures + timeout) is held to MAX_WITHDRAW_BOUND_S as well.
    Field(
        "TUNNEL_CHECK_INTERVAL_S",
        "number",
        10.0,
        "seconds between re-checks of the public URL",
        minimum=0.2,
        maximum=MAX_WITHDRAW_BOUND_S,
    ),
    Field(
        "TUNNEL_CHECK_FAILURES_TO_WITHDRAW",
        "integer",
        2,
        "consecutive failed re-checks before withdrawal",
        minimum=1,
        maximum=100,
    ),
    Field(
        "TUNNEL_CHECK_TIMEOUT_S",
        "number",
        8.0,
        "the most one check may take; below TUNNEL_CHECK_INTERVAL_S (default: 8, or 0.8 x a shorter interval)",
        minimum=0.1,
        maximum=MAX_WITHDRAW_BOUND_S,
    ),
    Field("GRADIO_SHARE_SERVER", "text", "", "TUNNEL_PROVIDER=gradio: your own frps (host:port)"),
    F.HANDOFF_DIR,
)

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


def url_host(host: str) -> str:
    """`host` as a URL writes it: an IPv6 address in brackets (CAPTURE_HOST=::1 is loopback too)."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def _url_problem(name: str, url: str) -> str | None:
    """Why `url` cannot be used (one line naming `name` and the fix), or None."""
    try:
        parts = urlsplit(url)
        port = parts.port  # raises ValueError on a port that is not 1-65535
    except ValueError as exc:
        return f"{name}={url!r} is not a usable URL ({exc}): e.g. http://172.17.0.1:8100"
    if parts.scheme not in ("http", "https"):
        return f"{name}={url!r} needs an http:// or https:// scheme, e.g. http://172.17.0.1:8100"
    why = _hostname_problem(parts.hostname or "")
    if why or port == 0:
        return f"{name}={url!r} is not a usable URL ({why or 'port 0'}): e.g. http://172.17.0.1:8100"
    if parts.query or parts.fragment or parts.username:
        return f"{name}={url!r} carries a query, fragment or credentials: give only scheme://host:port"
    return None


# How the table's rows are held (Table.attributes): each as its lowercased name, but for these.
RENAMED = {
    "TUNNEL_PROVIDER": "provider",
    "TUNNEL_METRICS_HOST": "metrics_host",
    "TUNNEL_METRICS_PORT": "metrics_port",
    "TUNNEL_CHECK_INTERVAL_S": "interval_s",
    "TUNNEL_CHECK_FAILURES_TO_WITHDRAW": "failures_to_withdraw",
    "TUNNEL_CHECK_TIMEOUT_S": "timeout_s",
}
# Read only to check TUNNEL_HOSTNAME against it: compose's word that a token is set, never the token.
APART = ("TUNNEL_NAMED",)


@dataclass(frozen=True)
class Settings(make_dataclass("TableSettings", FIELDS.attributes(RENAMED, APART), frozen=True)):
    """One attribute per row of FIELDS (RENAMED, APART); `read` derives most of them from several rows."""

    @property
    def tunnel(self) -> TunnelProvider:
        return TUNNEL_PROVIDERS.get(self.provider)

    @property
    def named(self) -> bool:
        return self.tunnel.named_by_hostname and bool(self.tunnel_hostname)

    @property
    def mode(self) -> str:
        """The provider as the hand-off records it: cloudflared-quick, cloudflared-named, gradio, direct."""
        return self.tunnel.mode(self.named)

    @property
    def withdraw_bound_s(self) -> float:
        return self.interval_s * self.failures_to_withdraw + self.timeout_s

    @property
    def valid_for_s(self) -> float:
        """How long a published record is trusted (its `valid_until` - `verified_at`)."""
        return self.withdraw_bound_s + WRITE_GRACE_S

    @property
    def local_health_url(self) -> str:
        return f"http://{url_host(self.capture_host)}:{self.capture_port}/health"

    def describe(self) -> str:
        return (
            f"provider={self.mode} capture=http://{self.capture_host}:{self.capture_port} "
            f"interval={self.interval_s:g}s failures_to_withdraw={self.failures_to_withdraw} "
            f"timeout={self.timeout_s:g}s -> a URL that stops serving this proxy is withdrawn within "
            f"{self.withdraw_bound_s:g}s (interval x failures + timeout); each published record is valid "
            f"for {self.valid_for_s:g}s unless re-verified"
        )


def load(env: Mapping[str, str] | None = None) -> Settings:
    """The settings, or EnvError listing every bad value at once, one line each (as the other services' readers)."""
    settings, problems = read(env)
    if problems:
        raise EnvError(problems)
    return settings


def read(env: Mapping[str, str] | None = None) -> tuple[Settings, list[str]]:
    """The settings and every problem with them. A bad value reads as its default (or as unset), so the checks
    that depend on it still run and each problem is found on the first start, not one per restart."""
    read = Env(env, collect=True)

    def get(name: str, default=_UNSET):
        return read.get(FIELDS[name]) if default is _UNSET else read.get(FIELDS[name], default)

    def refuse(line: str | None, value=None):
        return read.refuse(line, value) if line else value

    provider = get("TUNNEL_PROVIDER")
    tunnel = TUNNEL_PROVIDERS.get(provider)
    capture_port = get("CAPTURE_PORT")
    hostname = get("TUNNEL_HOSTNAME")
    if hostname.startswith(("http://", "https://")):
        hostname = refuse(
            f"TUNNEL_HOSTNAME={hostname!r} must be a bare hostname (e.g. capture.example.com): "
            "a named tunnel is always served as https://<hostname>",
            "",
        )
    hostname = hostname.rstrip("/")
    if hostname and (why := _hostname_problem(hostname.split(":")[0])):
        hostname = refuse(f"TUNNEL_HOSTNAME={hostname!r} is not a hostname ({why}): e.g. capture.example.com", "")
    # Unset (not compose) means "not said"; compose's empty means "no token".
    named_flag = get("TUNNEL_NAMED", "") if read.is_given("TUNNEL_NAMED") else None
    if tunnel.named_by_hostname and named_flag is not None:
        if named_flag and not hostname and not read.is_set("TUNNEL_HOSTNAME"):
            refuse(
                "TUNNEL_TOKEN is set (named tunnel) but TUNNEL_HOSTNAME is empty: set TUNNEL_HOSTNAME "
                "to the public hostname routed to this tunnel; it is the URL tunnel-check verifies"
            )
        if hostname and not named_flag:
            refuse(
                f"TUNNEL_HOSTNAME={hostname} is set but TUNNEL_TOKEN is empty: a quick tunnel gets a "
                "random trycloudflare.com hostname; set TUNNEL_TOKEN for the named tunnel or unset "
                "TUNNEL_HOSTNAME"
            )
    direct_url = get("DIRECT_URL")
    if tunnel.needs_direct_url:
        if not direct_url and not read.is_set("DIRECT_URL"):
            refuse(
                "TUNNEL_PROVIDER=direct needs DIRECT_URL: the capture proxy's URL as the sandbox "
                "reaches it (e.g. http://172.17.0.1:8100 for local docker sandboxes)"
            )
        elif direct_url:
            direct_url = refuse(_url_problem("DIRECT_URL", direct_url), direct_url)
    # Optional here (unset: no metrics discovery): a named tunnel or TUNNEL_LOG finds the URL without it.
    # compose passes the port it gives cloudflared's --metrics.
    metrics_port = get("TUNNEL_METRICS_PORT", None)
    tunnel_log = get("TUNNEL_LOG")
    if (
        tunnel.reports_through_metrics_or_log
        and not hostname
        and metrics_port is None
        and not tunnel_log
        and not read.is_set("TUNNEL_METRICS_PORT")
    ):
        refuse(
            "a quick tunnel's URL is found through TUNNEL_METRICS_PORT (cloudflared --metrics) or "
            "TUNNEL_LOG (cloudflared --logfile); set at least one"
        )
    interval = get("TUNNEL_CHECK_INTERVAL_S")
    failures = get("TUNNEL_CHECK_FAILURES_TO_WITHDRAW")
    timeout = get("TUNNEL_CHECK_TIMEOUT_S", min(FIELDS["TUNNEL_CHECK_TIMEOUT_S"].default, interval * 0.8))
    if timeout >= interval:
        refuse(
            f"TUNNEL_CHECK_TIMEOUT_S={timeout:g} must be below TUNNEL_CHECK_INTERVAL_S={interval:g}: "
            "checks run on a fixed schedule and one must end before the next starts, or the "
            "withdraw bound no longer holds"
        )
        timeout = interval * 0.8
    elif interval * failures + timeout > MAX_WITHDRAW_BOUND_S:
        refuse(
            f"TUNNEL_CHECK_INTERVAL_S={interval:g} x TUNNEL_CHECK_FAILURES_TO_WITHDRAW={failures} + "
            f"TUNNEL_CHECK_TIMEOUT_S={timeout:g} = {interval * failures + timeout:g} s: a URL that stops serving "
            f"would stay published that long, and every rollout started meanwhile fails; keep it at most "
            f"{MAX_WITHDRAW_BOUND_S:g} s (the defaults give 28 s)"
        )
    capture_host = get("CAPTURE_HOST")
    refuse(_url_problem("CAPTURE_HOST", f"http://{url_host(capture_host)}:{capture_port}"))
    gradio_server = get("GRADIO_SHARE_SERVER")
    if gradio_server:
        host, _, port = gradio_server.rpartition(":")
        if not port.isdigit() or not 0 < int(port) < 65536 or _hostname_problem(host):
            refuse(f"GRADIO_SHARE_SERVER={gradio_server!r} is not host:port (your frps), e.g. frps.example.com:7000")
    settings = Settings(
        **FIELDS.read_all(
            read,
            RENAMED,
            APART,
            given={
                "TUNNEL_PROVIDER": provider,
                "CAPTURE_HOST": capture_host,
                "CAPTURE_PORT": capture_port,
                "TUNNEL_METRICS_PORT": metrics_port,
                "TUNNEL_LOG": tunnel_log,
                "TUNNEL_HOSTNAME": hostname,
                "DIRECT_URL": direct_url,
                "GRADIO_SHARE_SERVER": gradio_server,
                "TUNNEL_CHECK_INTERVAL_S": interval,
                "TUNNEL_CHECK_FAILURES_TO_WITHDRAW": failures,
                "TUNNEL_CHECK_TIMEOUT_S": timeout,
            },
        )
    )
    return settings, read.problems
