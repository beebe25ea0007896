"""Cloudflare-style HTML error pages, the two a dead tunnel path produces.

What they must reproduce is what fools a naive readiness check: a real HTTP response, from a URL
that resolves, with an HTML body. 502 = the tunnel is connected but its origin (our capture proxy)
refused or dropped the request; 530 with error 1033 = the hostname is a tunnel that has no
connector (cloudflared is dead). Wording follows the public pages' structure, not their markup.
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime


def _page(host: str, status: int, code: int, title: str, what: str, fix: str) -> str:
    ray = secrets.token_hex(8)
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return f"""<!DOCTYPE html>
<html lang="en-US">
<head>
<title>{title} | {host} | Cloudflare</title>
<meta charset="UTF-8" />
<meta name="robots" content="noindex, nofollow" />
</head>
<body>
<div id="cf-wrapper">
  <div id="cf-error-details">
    <h1><span class="cf-error-type">Error</span> <span class="cf-error-code">{code}</span></h1>
    <span class="cf-footer-item">Ray ID: {ray} &bull; {when}</span>
    <h2 class="cf-subheadline">{title}</h2>
    <h2>What happened?</h2>
    <p>{what}</p>
    <h2>What can I do?</h2>
    <p>{fix}</p>
    <p>Cloudflare Ray ID: <strong>{ray}</strong> &bull; Performance &amp; security by Cloudflare
    (local tunnel stand-in, HTTP {status})</p>
  </div>
</div>
</body>
</html>
"""


def bad_gateway(host: str) -> tuple[int, str]:
    return 502, _page(
        host,
        502,
        502,
        "Bad gateway",
        f"The web server reported a bad gateway error: the tunnel for {host} is connected, but the "
        "origin service behind it did not answer.",
        "If you are the owner of this website: check that the service named in the tunnel's --url is "
        "running and reachable from cloudflared.",
    )


def tunnel_error(host: str) -> tuple[int, str]:
    return 530, _page(
        host,
        530,
        1033,
        "Cloudflare Tunnel error",
        f"You've requested a page on a website ({host}) that is on the Cloudflare network. The host "
        f"({host}) is configured as a Cloudflare Tunnel, and Cloudflare is currently unable to resolve it.",
        "If you are the owner of this website: ensure that cloudflared is running and can reach the network.",
    )
