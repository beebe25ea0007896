"""The hand-off file between tunnel-check and the env server."""

from __future__ import annotations

import json
import time

import handoff


def test_publish_then_read(tmp_path):
    v = handoff.publish("https://a.trycloudflare.com/", "inst-1", "cloudflared", tmp_path)
    got = handoff.read(tmp_path)
    assert got == v and got.url == "https://a.trycloudflare.com" and got.instance == "inst-1"


def test_reverifying_the_same_url_keeps_its_publish_time(tmp_path):
    first = handoff.publish("https://a.example", "i", "cloudflared", tmp_path)
    again = handoff.publish("https://a.example", "i", "cloudflared", tmp_path)
    moved = handoff.publish("https://b.example", "i", "cloudflared", tmp_path)
    assert again.published_at == first.published_at and again.verified_at >= first.verified_at
    assert moved.published_at >= again.verified_at


def test_withdrawn_reads_as_none_and_keeps_the_reason(tmp_path):
    handoff.publish("https://a.example", "i", "cloudflared", tmp_path)
    handoff.withdraw("530 error 1033: the tunnel is down", tmp_path)
    assert handoff.read(tmp_path) is None
    raw = handoff.read_raw(tmp_path)
    assert raw["state"] == "withdrawn" and raw["withdrawn_url"] == "https://a.example" and "1033" in raw["reason"]


def test_nothing_written_reads_as_none(tmp_path):
    assert handoff.read(tmp_path) is None and handoff.read_raw(tmp_path) == {}


def test_a_verification_older_than_the_bound_is_not_trusted(tmp_path):
    """A SIGKILLed tunnel-check cannot withdraw; the age of its last record is the tell."""
    handoff.publish("https://a.example", "i", "cloudflared", tmp_path)
    doc = json.loads((tmp_path / handoff.FILENAME).read_text())
    doc["verified_at"] = time.time() - 60
    (tmp_path / handoff.FILENAME).write_text(json.dumps(doc))
    assert handoff.read(tmp_path) is not None
    assert handoff.read(tmp_path, max_age_s=handoff.max_age_from_env({})) is None
    assert handoff.max_age_from_env({}) == 29.0
    assert (
        handoff.max_age_from_env(
            {"TUNNEL_CHECK_INTERVAL_S": "5", "TUNNEL_CHECK_FAILURES_TO_WITHDRAW": "3", "TUNNEL_CHECK_TIMEOUT_S": "4"}
        )
        == 20.0
    )


def test_a_torn_file_is_reported_not_trusted(tmp_path):
    (tmp_path / handoff.FILENAME).write_text('{"state": "verif')
    assert handoff.read(tmp_path) is None
    assert handoff.read_raw(tmp_path)["state"] == "unreadable"
