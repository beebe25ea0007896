"""Is this URL serving THIS capture proxy? One request, one verdict that names its cause.

A port that answers proves nothing: a tunnel whose forwarder died keeps resolving and answers with
the provider's error page, and a URL can route to a proxy that is not ours (a previous run, a
second stack). The only proof is the proxy's own `/health` document, fetched through the URL, whose
`instance` id (a uuid per capture-app process, OpenEnv `create_app`) equals the one the proxy
reports locally.
"""

from __future__ import annotations

import html
import json
import re
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx

# Failure causes, stable strings: logs, the hand-off's withdrawal reason and tests match on them.
NO_URL = "no URL announced"
LOCAL_DOWN = "capture proxy not answering locally"
LOCAL_BAD = "capture proxy /health unusable"
UNRESOLVABLE = "hostname not resolvable yet"
REFUSED = "connection refused"
CONNECT = "cannot connect"
TIMEOUT = "timeout"
PROVIDER_PAGE = "provider error page"
NOT_JSON = "HTML or other non-JSON body"
NOT_CAPTURE = "JSON without an instance id"
OTHER_INSTANCE = "JSON from another proxy instance"
BAD_STATUS = "unexpected HTTP status"


@dataclass(frozen=True)
class Verdict:
    ok: bool
    cause: str  # one of the constants above, or "verified"
    detail: str  # the whole sentence for the log and the withdrawal reason
    url: str | None = None
    instance: str | None = None

    def __str__(self) -> str:
        return self.detail


def ok(url: str, instance: str) -> Verdict:
    return Verdict(True, "verified", f"{url} serves this proxy (instance {instance})", url, instance)


def fail(cause: str, detail: str, url: str | None = None) -> Verdict:
    return Verdict(False, cause, f"{cause}: {detail}", url)


def _snippet(body: str, limit: int = 160) -> str:
    """Title + visible text of an HTML page (or the raw body), short enough for one log line."""
    title = re.search(r"<title[^>]*>(.*?)</title>", body, re.I | re.S)
    text = re.sub(r"<(script|style)[^>]*>.*?</\1>", " ", body, flags=re.I | re.S)
    text = html.unescape(re.sub(r"<[^>]+>", " ", text))
    text = re.sub(r"\s+", " ", text).strip()
    if title:
        head = re.sub(r"\s+", " ", html.unescape(title[1])).strip()
        text = f"{head} -- {text}" if head and not text.startswith(head) else text
    return text[:limit] + ("..." if len(text) > limit else "")


def _provider_page(status: int, body: str) -> str | None:
    """What a provider's own error page means, or None when the page is not one we recognise."""
    lower = body.lower()
    # On the visible text: the real pages put "Error" and "1033" in separate <span>s.
    code = re.search(r"error(?: code)?:?\s*(1\d\d\d)\b", _snippet(body, 2000), re.I)
    if status == 530 or (code and code[1] == "1033") or "tunnel error" in lower:
        which = f"Cloudflare error {code[1]}" if code else "Cloudflare tunnel error"
        return (
            f"{which}: the tunnel is not connected to the edge (the forwarding process is dead, "
            "restarting or cannot reach Cloudflare)"
        )
    if status in (502, 504) and ("cloudflare" in lower or "bad gateway" in lower or "<html" in lower):
        return "the tunnel is up but its origin did not answer it (is the capture proxy at the tunnel's --url alive?)"
    if status in (404, 410) and ("gradio" in lower or "frp" in lower or "tunnel" in lower):
        return "the share link is unknown to the share server (expired or its frpc client exited)"
    return None


def _is_dns_failure(exc: BaseException) -> bool:
    seen = exc
    while seen is not None:
        if isinstance(seen, socket.gaierror):
            return True
        seen = seen.__cause__ or seen.__context__
    return bool(re.search(r"Errno -[235]\b|Name or service not known|name resolution", str(exc)))


def new_client() -> httpx.Client:
    """One client for the life of the monitor (building an SSL context per check cost more than the
    0.8s check budget on a loaded 2-core host), but no kept-alive connections: every check dials
    and resolves the URL afresh, as a sandbox arriving now would."""
    return httpx.Client(follow_redirects=False, limits=httpx.Limits(max_keepalive_connections=0))


def local_instance(url: str, timeout_s: float, client: httpx.Client | None = None) -> tuple[str | None, Verdict | None]:
    """The local proxy's instance id, or the failure that prevented reading it."""
    try:
        resp = (client or httpx).get(url, timeout=timeout_s)
    except httpx.HTTPError as exc:
        return None, fail(
            LOCAL_DOWN,
            f"GET {url} failed ({type(exc).__name__}: {exc}); the env server's capture proxy must be "
            "up on CAPTURE_HOST:CAPTURE_PORT before anything can be published",
        )
    try:
        doc = resp.json()
        instance = doc.get("instance") if isinstance(doc, dict) else None
    except ValueError:
        instance = None
    if resp.status_code != 200 or not instance:
        return None, fail(
            LOCAL_BAD,
            f"GET {url} -> HTTP {resp.status_code} without an `instance` id ({_snippet(resp.text)!r}); "
            "is CAPTURE_PORT the OpenEnv capture proxy (not the Task API port)?",
        )
    return str(instance), None


def through(url: str, want_instance: str, timeout_s: float, client: httpx.Client | None = None) -> Verdict:
    """GET <url>/health and decide whether it is `want_instance` answering."""
    target = url.rstrip("/") + "/health"
    host = urlsplit(target).hostname or url
    own = client is None
    client = client or new_client()
    try:
        try:
            resp = client.get(target, timeout=timeout_s, headers={"Cache-Control": "no-cache"})
        except httpx.TimeoutException as exc:
            return fail(TIMEOUT, f"GET {target} got no answer within {timeout_s:g}s ({type(exc).__name__})", url)
        except httpx.ConnectError as exc:
            if _is_dns_failure(exc):
                return fail(
                    UNRESOLVABLE,
                    f"{host} does not resolve ({exc}); a new quick-tunnel hostname can take a minute to appear in DNS",
                    url,
                )
            if "refused" in str(exc).lower():
                return fail(REFUSED, f"GET {target}: nothing listens there ({exc}); the forwarder is down", url)
            return fail(CONNECT, f"GET {target}: {exc}", url)
        except httpx.HTTPError as exc:
            return fail(CONNECT, f"GET {target}: {type(exc).__name__}: {exc}", url)
    finally:
        if own:
            client.close()

    body = resp.text
    ctype = resp.headers.get("content-type", "")
    doc = None
    if "json" in ctype or body.lstrip().startswith(("{", "[")):
        try:
            doc = json.loads(body)
        except ValueError:
            doc = None

    if resp.status_code != 200:
        meaning = _provider_page(resp.status_code, body) if doc is None else None
        if meaning:
            return fail(
                PROVIDER_PAGE,
                f"GET {target} -> HTTP {resp.status_code}, {meaning}; page: {_snippet(body)!r}",
                url,
            )
        return fail(
            BAD_STATUS,
            f"GET {target} -> HTTP {resp.status_code} ({ctype or 'no content-type'}): {_snippet(body)!r}",
            url,
        )
    if doc is None:
        return fail(
            NOT_JSON,
            f"GET {target} -> HTTP 200 {ctype or 'without content-type'}, not the proxy's JSON health "
            f"document: {_snippet(body)!r}",
            url,
        )
    got = doc.get("instance") if isinstance(doc, dict) else None
    if not got:
        return fail(
            NOT_CAPTURE,
            f"GET {target} -> JSON without `instance` ({_snippet(body)!r}): not an OpenEnv capture proxy",
            url,
        )
    if str(got) != want_instance:
        return fail(
            OTHER_INSTANCE,
            f"GET {target} answered instance {got}, this proxy is {want_instance}: the URL routes to a "
            "different capture proxy (an old run, another stack, or the wrong port behind the tunnel); "
            "sessions minted here would be rejected there",
            url,
        )
    return ok(url, want_instance)
