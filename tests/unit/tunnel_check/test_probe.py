"""Each way a URL can fail to be this proxy gets its own named cause.

Cloudflare's edge is unreachable from here, so its answers (the 530/1033 and 502 pages, a 200 HTML
page) are replayed through httpx.MockTransport, shaped like the real pages quoted in public
reports (cloudflared#282: a 530 with `<title>Argo Tunnel error | host | Cloudflare</title>` and the
code in its own <span>). Resolution and refusal use the real network stack: `.invalid` never
resolves (RFC 6761), and nothing listens on the refused port.
"""

import socket

import httpx

from tunnel_check import probe

ME = "6c1f0e4a9b8d4f2e8a7b6c5d4e3f2a1b"
URL = "https://four-dashed-word-url.trycloudflare.com"
GET = f"GET {URL}/health"

PAGE_1033 = """<!DOCTYPE html>
<!--[if lt IE 7]> <html class="no-js ie6 oldie" lang="en-US"> <![endif]-->
<html class="no-js" lang="en-US"> <!--<![endif]-->
<head>
<title>Cloudflare Tunnel error | four-dashed-word-url.trycloudflare.com | Cloudflare</title>
<meta charset="UTF-8" />
<link rel="stylesheet" id="cf_styles-css" href="/cdn-cgi/styles/main.css" />
</head>
<body><div id="cf-wrapper"><div id="cf-error-details" class="cf-error-details-wrapper">
<h1 data-translate="error"><span class="cf-error-type">Error</span> <span class="cf-error-code">1033</span></h1>
<span class="cf-footer-item">Ray ID: 99e3e433659710be &bull; 2025-11-14 04:51:02 UTC</span>
<h2 class="cf-subheadline">Cloudflare Tunnel error</h2>
<p>The host (four-dashed-word-url.trycloudflare.com) is configured as a Cloudflare Tunnel, and Cloudflare is currently unable to resolve it.</p>
</div></div></body></html>"""

PAGE_502 = """<!DOCTYPE html><html lang="en-US"><head>
<title>four-dashed-word-url.trycloudflare.com | 502: Bad gateway</title></head>
<body><div id="cf-error-details"><h1><span class="inline-block">Bad gateway</span>
<span class="code-label">Error code 502</span></h1>
<p>The web server reported a bad gateway error.</p></div></body></html>"""


def through(handler):
    client = httpx.Client(transport=httpx.MockTransport(handler))
    return probe.through(URL, ME, 2.0, client)


def test_own_instance_is_verified():
    v = through(lambda r: httpx.Response(200, json={"status": "ok", "instance": ME}))
    assert v.ok and v.url == URL and v.instance == ME


def test_dead_tunnel_530_page_names_error_1033():
    v = through(lambda r: httpx.Response(530, text=PAGE_1033, headers={"content-type": "text/html"}))
    assert not v.ok and v.cause == probe.PROVIDER_PAGE
    assert v.detail == (
        f"provider error page: {GET} -> HTTP 530, Cloudflare error 1033: the tunnel is not connected to the edge "
        "(the forwarding process is dead, restarting or cannot reach Cloudflare); page: 'Cloudflare Tunnel error | "
        "four-dashed-word-url.trycloudflare.com | Cloudflare Error 1033 Ray ID: 99e3e433659710be \u2022 2025-11-14 "
        "04:51:02 UTC Cloudflare Tunnel er...'"
    )


def test_dead_origin_502_page():
    v = through(lambda r: httpx.Response(502, text=PAGE_502, headers={"content-type": "text/html; charset=UTF-8"}))
    assert v.cause == probe.PROVIDER_PAGE
    assert v.detail == (
        f"provider error page: {GET} -> HTTP 502, the tunnel is up but its origin did not answer it (is the capture "
        "proxy at the tunnel's --url alive?); page: 'four-dashed-word-url.trycloudflare.com | 502: Bad gateway Bad "
        "gateway Error code 502 The web server reported a bad gateway error.'"
    )


def test_html_with_200_is_not_a_health_document():
    v = through(
        lambda r: httpx.Response(
            200, text="<html><title>Gradio</title><body>app</body></html>", headers={"content-type": "text/html"}
        )
    )
    assert v.cause == probe.NOT_JSON
    assert v.detail == (
        f"HTML or other non-JSON body: {GET} -> HTTP 200 text/html, not the proxy's JSON health document: 'Gradio app'"
    )


def test_json_from_another_instance_is_rejected_with_both_ids():
    v = through(lambda r: httpx.Response(200, json={"status": "ok", "instance": "f" * 32}))
    assert v.cause == probe.OTHER_INSTANCE
    assert v.detail == (
        f"JSON from another proxy instance: {GET} answered instance {'f' * 32}, this proxy is {ME}: the URL routes "
        "to a different capture proxy (an old run, another stack, or the wrong port behind the tunnel); sessions "
        "minted here would be rejected there"
    )


def test_json_without_instance_is_not_a_capture_proxy():
    v = through(lambda r: httpx.Response(200, json={"status": "healthy"}))
    assert v.cause == probe.NOT_CAPTURE
    assert v.detail == (
        f'JSON without an instance id: {GET} -> JSON without `instance` (\'{{"status":"healthy"}}\'): not an '
        "OpenEnv capture proxy"
    )


def test_non_200_json_is_an_unexpected_status():
    v = through(lambda r: httpx.Response(401, json={"detail": "unknown session"}))
    assert v.cause == probe.BAD_STATUS
    assert (
        v.detail == f'unexpected HTTP status: {GET} -> HTTP 401 (application/json): \'{{"detail":"unknown session"}}\''
    )


def test_a_url_that_does_not_answer_in_time_is_a_timeout_naming_the_wait():
    def slow(request):
        raise httpx.ReadTimeout("timed out", request=request)

    v = through(slow)
    assert v.cause == probe.TIMEOUT
    assert v.detail == f"timeout: {GET} got no answer within 2s (ReadTimeout)"


def test_unresolvable_hostname_is_named_as_such():
    v = probe.through("https://tunnel-check-unit.invalid", ME, 5.0)
    assert v.cause == probe.UNRESOLVABLE and "tunnel-check-unit.invalid" in v.detail


def test_refused_port_means_the_forwarder_is_down():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connections are refused
        v = probe.through(f"http://127.0.0.1:{port}", ME, 2.0)
    assert v.cause == probe.REFUSED and "forwarder is down" in v.detail


def test_local_instance_rejects_a_port_that_is_not_the_capture_proxy():
    client = httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(200, json={"status": "ok"})))
    instance, bad = probe.local_instance("http://127.0.0.1:8000/health", 1.0, client)
    assert instance is None and bad.cause == probe.LOCAL_BAD and "CAPTURE_PORT" in bad.detail
