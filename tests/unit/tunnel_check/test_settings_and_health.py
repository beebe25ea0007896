"""Settings fail with one line that names the fix; the bounds are derived in one place and travel in
the record (valid_until); the healthcheck is healthy only for a published, still valid URL."""

import json
import time

import pytest

from stack import handoff
from stack.env import EnvError
from stack.facts import HANDOFF_FILE
from stack.readers import tunnel_check as settings
from tunnel_check import health

BASE = {"TUNNEL_PROVIDER": "cloudflared", "TUNNEL_METRICS_PORT": "20241", "CAPTURE_PORT": "8100"}


def load(**env):
    return settings.load({**BASE, **env})


def test_bounds_are_interval_times_failures_plus_timeout():
    s = load(TUNNEL_CHECK_INTERVAL_S="10", TUNNEL_CHECK_FAILURES_TO_WITHDRAW="2", TUNNEL_CHECK_TIMEOUT_S="8")
    assert s.withdraw_bound_s == 28 and s.valid_for_s == 29
    assert "withdrawn within 28s" in s.describe() and "valid for 29s" in s.describe()


@pytest.mark.parametrize(
    "env, fix",
    [
        (
            {"TUNNEL_PROVIDER": "ngrok"},
            "TUNNEL_PROVIDER='ngrok' is not allowed: set TUNNEL_PROVIDER to one of: cloudflared",
        ),
        ({"TUNNEL_PROVIDER": "direct"}, "needs DIRECT_URL"),
        ({"TUNNEL_PROVIDER": "direct", "DIRECT_URL": "172.17.0.1:8100"}, "with its scheme"),
        ({"TUNNEL_NAMED": "1"}, "set TUNNEL_HOSTNAME"),
        ({"TUNNEL_NAMED": "", "TUNNEL_HOSTNAME": "capture.example.com"}, "TUNNEL_TOKEN is empty"),
        ({"TUNNEL_NAMED": "1", "TUNNEL_HOSTNAME": "https://capture.example.com"}, "bare hostname"),
        ({"TUNNEL_METRICS_PORT": "", "TUNNEL_LOG": ""}, "TUNNEL_METRICS_PORT"),
        ({"TUNNEL_CHECK_INTERVAL_S": "5", "TUNNEL_CHECK_TIMEOUT_S": "5"}, "must be below"),
        ({"TUNNEL_CHECK_INTERVAL_S": "ten"}, "not a number"),
        ({"TUNNEL_CHECK_FAILURES_TO_WITHDRAW": "0"}, "at least 1"),
        ({"CAPTURE_PORT": "80000"}, "not a TCP port"),
    ],
)
def test_bad_settings_are_one_line_naming_the_fix(env, fix):
    with pytest.raises(EnvError) as err:
        load(**env)
    assert fix in str(err.value) and "\n" not in str(err.value)


def test_provider_modes():
    assert load().mode == "cloudflared-quick"
    assert load(TUNNEL_NAMED="1", TUNNEL_HOSTNAME="capture.example.com").mode == "cloudflared-named"
    assert load(TUNNEL_PROVIDER="gradio").mode == "gradio"
    assert load(TUNNEL_PROVIDER="direct", DIRECT_URL="http://172.17.0.1:8100/").direct_url == "http://172.17.0.1:8100"


def test_health_follows_the_handoff(tmp_path):
    s = load(HANDOFF_DIR=str(tmp_path), TUNNEL_CHECK_INTERVAL_S="1", TUNNEL_CHECK_TIMEOUT_S="0.5")
    assert health.status(s) == (
        False,
        "unhealthy: no verified URL is published (no URL verified yet (tunnel-check has published nothing))",
    )

    handoff.publish("https://a-b-c-d.trycloudflare.com", "abc", "cloudflared-quick", s.valid_for_s, tmp_path)
    path = tmp_path / HANDOFF_FILE
    doc = json.loads(path.read_text())
    doc["verified_at"] = time.time() - 12  # verified 12 s ago, still within its validity
    path.write_text(json.dumps(doc))
    assert health.status(s) == (
        True,
        "healthy: https://a-b-c-d.trycloudflare.com (cloudflared-quick) serves capture proxy instance abc, "
        "verified 12.0s ago",
    )

    handoff.withdraw("HTTP 530 error 1033", tmp_path)
    assert health.status(s) == (False, "unhealthy: no verified URL is published (withdrawn: HTTP 530 error 1033)")


def test_health_rejects_an_expired_record(tmp_path):
    """The healthcheck reads the record's own valid_until, as env-server does; no bound of its own."""
    s = load(HANDOFF_DIR=str(tmp_path), TUNNEL_CHECK_INTERVAL_S="1", TUNNEL_CHECK_TIMEOUT_S="0.5")
    handoff.publish("https://a-b-c-d.trycloudflare.com", "abc", "cloudflared-quick", s.valid_for_s, tmp_path)
    path = tmp_path / HANDOFF_FILE
    doc = json.loads(path.read_text())
    doc["verified_at"], doc["valid_until"] = time.time() - 20, time.time() - 5
    path.write_text(json.dumps(doc))
    assert health.status(s) == (
        False,
        "unhealthy: no verified URL is published (https://a-b-c-d.trycloudflare.com was last verified 20s ago and "
        "its record expired 5s ago: tunnel-check has stopped re-checking it (docker compose logs tunnel-check))",
    )


def test_the_monitor_writes_valid_until_from_its_own_schedule(tmp_path):
    from tunnel_check import probe
    from tunnel_check.monitor import Monitor

    s = load(HANDOFF_DIR=str(tmp_path), TUNNEL_CHECK_INTERVAL_S="3", TUNNEL_CHECK_TIMEOUT_S="2")
    monitor = Monitor(s, discovery=object())
    monitor.apply(probe.Verdict(True, "", "ok", "https://a.example", "abc"))
    doc = json.loads((tmp_path / HANDOFF_FILE).read_text())
    assert doc["valid_until"] - doc["verified_at"] == pytest.approx(3 * 2 + 2 + 1)


def test_every_bad_value_is_reported_at_once():
    """Like the other services' readers: each bad value its own line, on the first start, instead of one line per
    restart (the reader stopped at the first one)."""
    with pytest.raises(EnvError) as err:
        load(
            TUNNEL_PROVIDER="direct",
            DIRECT_URL="http://u:p@172.17.0.1:8100",
            TUNNEL_CHECK_INTERVAL_S="ten",
            TUNNEL_CHECK_FAILURES_TO_WITHDRAW="0",
            GRADIO_SHARE_SERVER="frps.example.com",
            CAPTURE_HOST="local_host!",
        )
    assert err.value.problems == [
        "DIRECT_URL='http://u:p@172.17.0.1:8100' carries a query, fragment or credentials: give only scheme://host:port",
        "TUNNEL_CHECK_INTERVAL_S='ten' is not a number: set TUNNEL_CHECK_INTERVAL_S to a number (default 10.0)",
        "TUNNEL_CHECK_FAILURES_TO_WITHDRAW='0' is below 1: set TUNNEL_CHECK_FAILURES_TO_WITHDRAW to at least 1 "
        "(default 2)",
        "CAPTURE_HOST='http://local_host!:8100' is not a usable URL ('local_host!' is not a valid hostname label): "
        "e.g. http://172.17.0.1:8100",
        "GRADIO_SHARE_SERVER='frps.example.com' is not host:port (your frps), e.g. frps.example.com:7000",
    ]


def test_a_refused_value_does_not_also_read_as_missing():
    """A DIRECT_URL, TUNNEL_HOSTNAME or TUNNEL_METRICS_PORT refused as malformed is that one line, not also
    'needs DIRECT_URL' / 'TUNNEL_HOSTNAME is empty' / 'set at least one'."""
    for env, line in [
        (
            {"TUNNEL_PROVIDER": "direct", "DIRECT_URL": "172.17.0.1:8100"},
            "DIRECT_URL='172.17.0.1:8100' is not an http(s) URL: set DIRECT_URL with its scheme, e.g. "
            "http://172.17.0.1:8100 (https:// for E2B sandboxes)",
        ),
        (
            {"TUNNEL_NAMED": "1", "TUNNEL_HOSTNAME": "https://capture.example.com"},
            "TUNNEL_HOSTNAME='https://capture.example.com' must be a bare hostname (e.g. capture.example.com): a named "
            "tunnel is always served as https://<hostname>",
        ),
        (
            {"TUNNEL_METRICS_PORT": "metrics"},
            "TUNNEL_METRICS_PORT='metrics' is not a TCP port: set TUNNEL_METRICS_PORT to a number in 1-65535",
        ),
    ]:
        with pytest.raises(EnvError) as err:
            load(**env)
        assert err.value.problems == [line]
