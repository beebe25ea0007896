"""The hand-off follows the tunnel: the real capture proxy behind the stand-in, tunnel-check as its
own process, every transition observed through the hand-off file and the healthcheck command.

Scenario order matters (one tunnel-check watches one stand-in slot), so the module runs as one
story: verified -> 502 -> 530 -> another instance -> forwarder killed -> new URL.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from support import wait_until

from stack import handoff

# Timings for the check under test: small, so the suite is quick, and valid (timeout < interval).
INTERVAL_S, FAILURES, TIMEOUT_S = 2.0, 2, 1.5
BOUND_S = INTERVAL_S * FAILURES + TIMEOUT_S  # what tunnel-check prints and promises
# Polling slack beyond the bound: process scheduling on a shared 2-core host, not the monitor.
SLACK_S = 6.0


@pytest.fixture(scope="module")
def story(proxies, tmp_path_factory, kit):
    tmp = tmp_path_factory.mktemp("tunnel")
    standin_port, restarted_port, metrics_port = kit.free_ports(3)
    standin = kit.Standin(tmp, standin_port, metrics_port)
    env = {
        "TUNNEL_PROVIDER": "cloudflared",
        "TUNNEL_METRICS_PORT": str(metrics_port),
        "TUNNEL_LOG": str(standin.tunnel_log),
        "CAPTURE_PORT": str(kit.PROXY_A),
        "TUNNEL_CHECK_INTERVAL_S": str(INTERVAL_S),
        "TUNNEL_CHECK_FAILURES_TO_WITHDRAW": str(FAILURES),
        "TUNNEL_CHECK_TIMEOUT_S": str(TIMEOUT_S),
        "HANDOFF_DIR": str(tmp / "handoff"),
    }
    log = tmp / "tunnel-check.out"
    checker = kit.spawn("tunnel_check", env, log)
    state = {"standin": standin, "env": env, "dir": tmp / "handoff", "log": log, "proxies": proxies, "kit": kit}
    state.update(metrics_port=metrics_port, restarted_port=restarted_port)
    yield state
    checker.terminate()
    checker.wait(timeout=15)
    state["standin"].stop()
    # Stopping withdraws: nothing stale is left for an env server to hand out.
    assert handoff.lookup(tmp / "handoff")[0] is None
    assert "tunnel-check stopped" in handoff.read_raw(tmp / "handoff")["reason"]


def healthcheck(story) -> subprocess.CompletedProcess:
    env = {**story["env"], "PYTHONPATH": str(story["kit"].SERVICES)}
    return subprocess.run(
        [sys.executable, "-m", "tunnel_check.health"], env=env, capture_output=True, text=True, timeout=60
    )


def published(story, url):
    doc = handoff.lookup(story["dir"])[0]
    return doc if doc is not None and doc.url == url else None


def wait_published(story, url):
    kit = story["kit"]
    return wait_until(lambda: published(story, url), kit.START_DEADLINE_S, f"{url} published", log=story["log"])


def wait_withdrawn(story, since: float):
    def withdrawn():
        raw = handoff.read_raw(story["dir"])
        return raw if raw.get("state") == "withdrawn" and raw.get("withdrawn_at", 0) >= since else None

    raw = wait_until(withdrawn, BOUND_S + SLACK_S, "withdrawal", log=story["log"])
    return raw


def test_verified_url_is_published_with_this_proxys_instance(story):
    a, _ = story["proxies"]
    doc = wait_published(story, story["standin"].url)
    assert doc.instance == a.instance
    assert doc.provider == "cloudflared-quick"
    result = healthcheck(story)
    assert result.returncode == 0, result.stdout
    assert story["standin"].url in result.stdout
    assert f"within {BOUND_S:g}s" in story["log"].read_text()  # the bound is stated at startup


def tunnel_ready(story) -> int:
    """The tunnel service's own healthcheck (stand-in form of `cloudflared tunnel ... ready`)."""
    env = {"PYTHONPATH": str(story["kit"].SERVICES), "TUNNEL_METRICS_PORT": str(story["metrics_port"])}
    return subprocess.run(
        [sys.executable, "-m", "tunnel_standin.ready"], env=env, capture_output=True, timeout=60
    ).returncode


@pytest.mark.parametrize(
    "mode, expected, ready", [("502", ["HTTP 502", "origin did not answer"], 0), ("530", ["HTTP 530", "error 1033"], 1)]
)
def test_provider_error_page_is_rejected_and_withdrawn_with_its_cause(story, mode, expected, ready):
    standin = story["standin"]
    wait_published(story, standin.url)
    assert tunnel_ready(story) == 0
    since = time.time()
    standin.admin(f"mode/{mode}")
    # A dead origin leaves the tunnel "ready" (exactly why readiness is not the test); a dead
    # tunnel does not.
    assert tunnel_ready(story) == ready
    raw = wait_withdrawn(story, since)
    assert raw["withdrawn_url"] == standin.url
    assert "provider error page" in raw["reason"]
    for text in expected:
        assert text in raw["reason"]
    result = healthcheck(story)
    assert result.returncode == 1 and "no verified URL" in result.stdout

    standin.admin("mode/forward")
    wait_published(story, standin.url)


def test_second_proxy_instance_behind_the_url_is_rejected(story):
    a, b = story["proxies"]
    standin = story["standin"]
    wait_published(story, standin.url)
    since = time.time()
    standin.admin(f"target/{story['kit'].PROXY_B}")
    try:
        raw = wait_withdrawn(story, since)
        assert "JSON from another proxy instance" in raw["reason"]
        assert b.instance in raw["reason"] and a.instance in raw["reason"]
    finally:
        standin.admin(f"target/{story['kit'].PROXY_A}")
    assert wait_published(story, standin.url).instance == a.instance


def test_killed_forwarder_is_withdrawn_within_the_bound_and_a_new_url_is_published(story, tmp_path):
    old = story["standin"]
    wait_published(story, old.url)
    killed_at = time.time()
    old.kill()
    raw = wait_withdrawn(story, killed_at)
    assert raw["withdrawn_url"] == old.url
    # Metrics are gone with the process; the log's last banner still names the old URL, and the
    # request to it is refused.
    assert "connection refused" in raw["reason"] or "no URL announced" in raw["reason"]
    took = raw["withdrawn_at"] - killed_at
    print(f"withdrawn {took:.1f}s after the kill (bound {BOUND_S:g}s)")
    assert took <= BOUND_S, f"withdrawn {took:.1f}s after the kill, past the promised {BOUND_S:g}s"
    assert healthcheck(story).returncode == 1

    # cloudflared restarted: same metrics port, a NEW public URL.
    story["standin"] = new = story["kit"].Standin(
        old.tunnel_log.parent, story["restarted_port"], story["metrics_port"], name="standin-restarted"
    )
    assert new.url != old.url
    doc = wait_published(story, new.url)
    assert doc.instance == story["proxies"][0].instance
    assert healthcheck(story).returncode == 0
