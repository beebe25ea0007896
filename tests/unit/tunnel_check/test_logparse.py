"""The log parser against real cloudflared and gradio output.

Console lines are quoted from public cloudflared reports (GitHub issues cloudflare/cloudflared#735,
#555, homeassistant-apps/app-cloudflared#671, #581, Shopify/shopify-app-template-node#1164); the
banner box is exactly what cmd/cloudflared/tunnel/quick_tunnel.go prints (AsciiBox, padding 2).
JSON lines are zerolog's raw format, which cloudflared writes to --logfile (cloudflared#632).
"""

import json

from tunnel_check import logparse

HEADER = "Your quick Tunnel has been created! Visit it at (it may take some time to be reachable):"


def box(url):
    width = max(len(HEADER), len(url))
    border = "+" + "-" * (width + 4) + "+"
    return [border, "|  " + HEADER.ljust(width) + "  |", "|  " + url.ljust(width) + "  |", border]


def console(time, level, msg):
    return f"{time} {level} {msg}"


QUICK_START = [
    "2022-11-11T19:57:55Z INF Thank you for trying Cloudflare Tunnel. Doing so, without a Cloudflare "
    "account, is a quick way to experiment and try it out. However, be aware that these account-less "
    "Tunnels have no uptime guarantee. If you intend to use Tunnels in production you should use a "
    "pre-created named tunnel by following: https://developers.cloudflare.com/cloudflare-one/connections/connect-apps",
    "2022-11-11T19:57:55Z INF Requesting new quick Tunnel on trycloudflare.com...",
    *[console("2022-11-11T19:57:58Z", "INF", line) for line in box("https://four-dashed-word-url.trycloudflare.com")],
    "2022-11-11T19:57:58Z INF Version 2022.10.3",
    "2022-11-11T19:57:58Z INF Starting metrics server on 127.0.0.1:20241/metrics",
    "2024-07-09T08:18:43Z INF Registered tunnel connection connIndex=0 "
    "connection=02cb73dd-a7a1-4f7d-9e19-b0ba5f6bff11 event=0 ip=198.41.200.63 location=bru01 protocol=quic",
]

RECONNECT_CHURN = [
    "2022-08-21T00:22:25Z INF Unregistered tunnel connection connIndex=0",
    '2022-08-21T00:22:25Z WRN Failed to serve quic connection error="failed to accept QUIC stream: '
    'timeout: no recent network activity" connIndex=0 ip=198.41.200.13',
    '2022-08-21T00:22:25Z WRN Serve tunnel error error="failed to accept QUIC stream: timeout: no '
    'recent network activity" connIndex=0 ip=198.41.200.13',
    "2022-08-21T00:22:25Z INF Retrying connection in up to 1s seconds connIndex=0 ip=198.41.200.13",
]


def test_console_banner_gives_the_quick_tunnel_url_and_registration_counts():
    state = logparse.parse_lines(QUICK_START)
    assert state.url == "https://four-dashed-word-url.trycloudflare.com"
    assert state.source == "cloudflared-banner"
    assert state.banners == 1
    assert state.registered == 1
    assert state.last_problem is None


def test_quic_errors_and_unregistration_are_remembered_for_failure_messages():
    state = logparse.parse_lines(QUICK_START + RECONNECT_CHURN)
    assert state.url == "https://four-dashed-word-url.trycloudflare.com"  # churn is not a new URL
    assert state.registered == 0
    assert state.last_problem.level == "warn"
    assert "failed to accept QUIC stream" in state.last_problem.message
    assert "0 registered connection(s)" in state.hint()
    assert "failed to accept QUIC stream" in state.hint()


def test_reconnect_after_churn_counts_the_connection_again():
    again = (
        "2023-11-17T22:18:38Z INF Registered tunnel connection connIndex=0 "
        "connection=9c37c412-77dd-4104-82d5-d8ad709efb7e event=0 ip=198.41.200.113 location=man03 protocol=quic"
    )
    state = logparse.parse_lines(QUICK_START + RECONNECT_CHURN + [again])
    assert state.registered == 1


def test_old_connection_registered_format_is_understood():
    # cloudflared 2023.x printed "Connection <uuid> registered with protocol: quic" (cloudflared#919).
    line = (
        "2023-03-25T02:39:36Z INF Connection c190c520-25ce-42a4-9ad4-cce158903bb8 registered with "
        "protocol: quic connIndex=0 ip=198.41.192.107 location=CDG"
    )
    assert logparse.parse_lines([line]).registered == 1


def test_logfile_json_lines_are_parsed_like_the_console():
    # cloudflared --logfile: zerolog JSON, one banner box line per record.
    url = "https://edges-stockings-minds-uc.trycloudflare.com"
    lines = [
        json.dumps(
            {
                "level": "info",
                "time": "2024-05-18T10:00:00Z",
                "message": "Requesting new quick Tunnel on trycloudflare.com...",
            }
        ),
        *[json.dumps({"level": "info", "time": "2024-05-18T10:00:03Z", "message": m}) for m in box(url)],
        json.dumps(
            {
                "level": "info",
                "connIndex": 0,
                "connection": "43399760-3a62-4bf6-aa3e-d923390a366a",
                "event": 0,
                "ip": "198.41.192.227",
                "location": "ams07",
                "protocol": "quic",
                "time": "2024-05-18T10:00:04Z",
                "message": "Registered tunnel connection",
            }
        ),
        # verbatim from cloudflared#632
        '{"level":"warn","connIndex":1,"error":"failed to accept QUIC stream: Application error 0x0",'
        '"time":"2022-04-26T16:00:31Z","message":"Failed to serve quic connection"}',
    ]
    state = logparse.parse_lines(lines)
    assert state.url == url
    assert state.registered == 1
    assert state.last_problem.time == "2022-04-26T16:00:31Z"
    assert "Application error 0x0" in state.last_problem.message


def test_restarted_cloudflared_appends_a_new_banner_and_the_last_one_wins():
    first = [console("2024-01-24T21:40:00Z", "INF", m) for m in box("https://old-tunnel-words-here.trycloudflare.com")]
    second = [console("2024-01-24T21:46:40Z", "INF", m) for m in box("https://new-tunnel-words-here.trycloudflare.com")]
    state = logparse.parse_lines(first + QUICK_START[-1:] + RECONNECT_CHURN + second)
    assert state.url == "https://new-tunnel-words-here.trycloudflare.com"
    assert state.banners == 2
    assert state.registered == 0  # the new process has not registered yet


def test_failed_quick_tunnel_request_gives_no_url_but_a_reason():
    # verbatim from cloudflared#555 (no level prefix: cloudflared's exit error)
    lines = QUICK_START[:2] + [
        'failed to request quick Tunnel: Post "https://api.trycloudflare.com/tunnel": dial tcp: lookup '
        "api.trycloudflare.com on 127.0.0.11:53: no such host"
    ]
    state = logparse.parse_lines(lines)
    assert state.url is None
    assert "failed to request quick Tunnel" in state.last_problem.message


def test_named_tunnel_log_has_no_url():
    lines = [
        "2021-03-23T12:24:28Z INF Starting tunnel tunnelID=d076ee66-9b54-4ba8-aebe-919d12e02884",
        "2024-07-09T08:18:43Z INF Registered tunnel connection connIndex=1 "
        "connection=43399760-3a62-4bf6-aa3e-d923390a366a event=0 ip=198.41.192.227 location=ams07 protocol=quic",
    ]
    state = logparse.parse_lines(lines)
    assert state.url is None and state.registered == 1


def test_gradio_share_line():
    lines = [
        "* Running on local URL:  http://127.0.0.1:7860",
        "* Running on public URL: https://0f3a9c1d2e4b5a6f70.gradio.live",
        "",
        "This share link expires in 1 week. For free permanent hosting and GPU upgrades, run `gradio deploy`",
    ]
    state = logparse.parse_lines(lines)
    assert state.url == "https://0f3a9c1d2e4b5a6f70.gradio.live"
    assert state.source == "gradio"


def test_request_logs_naming_the_hostname_do_not_replace_the_banner():
    line = (
        '2026-06-28T04:51:28Z ERR Request failed error="stream 9 canceled by remote with error code 0" '
        "connIndex=0 dest=https://stale-other-host.trycloudflare.com/health"
    )
    state = logparse.parse_lines(QUICK_START + [line])
    assert state.url == "https://four-dashed-word-url.trycloudflare.com"


def test_parse_file_reads_only_the_tail_and_skips_the_cut_line(tmp_path):
    path = tmp_path / "cloudflared.log"
    filler = "\n".join(f'{{"level":"debug","time":"t","message":"rpcconnect: tx {i}"}}' for i in range(2000))
    banner = "\n".join(
        json.dumps({"level": "info", "time": "t", "message": m}) for m in box("https://tail-only-url.trycloudflare.com")
    )
    path.write_text(filler + "\n" + banner + "\n")
    state = logparse.parse_file(path, tail_bytes=4096)
    assert state.url == "https://tail-only-url.trycloudflare.com"


def test_parse_file_missing_is_empty(tmp_path):
    assert logparse.parse_file(tmp_path / "absent.log").url is None


def test_url_from_hostname_follows_cloudflared():
    assert (
        logparse.url_from_hostname("four-dashed-word-url.trycloudflare.com")
        == "https://four-dashed-word-url.trycloudflare.com"
    )
    assert logparse.url_from_hostname("http://172.17.0.1:40123/") == "http://172.17.0.1:40123"
