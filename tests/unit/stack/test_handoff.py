"""The hand-off between tunnel-check and its readers: the record states its own validity."""

from __future__ import annotations

import json
import time

from stack import handoff
from stack.facts import HANDOFF_FILE


def test_publish_then_lookup(tmp_path):
    v = handoff.publish("https://a.trycloudflare.com/", "inst-1", "cloudflared", 29.0, tmp_path)
    got, why = handoff.lookup(tmp_path)
    assert got == v and why == ""
    assert got.url == "https://a.trycloudflare.com" and got.instance == "inst-1"
    assert got.valid_until == got.verified_at + 29.0
    doc = json.loads((tmp_path / HANDOFF_FILE).read_text())
    assert doc["state"] == "verified" and doc["valid_until"] == got.valid_until


def test_reverifying_the_same_url_keeps_its_publish_time(tmp_path):
    first = handoff.publish("https://a.example", "i", "cloudflared", 10, tmp_path)
    again = handoff.publish("https://a.example", "i", "cloudflared", 10, tmp_path)
    moved = handoff.publish("https://b.example", "i", "cloudflared", 10, tmp_path)
    assert again.published_at == first.published_at and again.verified_at >= first.verified_at
    assert moved.published_at >= again.verified_at


def test_valid_until_is_the_writers_promise_and_nothing_else(tmp_path):
    """The reader needs no schedule: valid one second before valid_until, expired one second after."""
    v = handoff.publish("https://a.example", "i", "cloudflared", 5.0, tmp_path)
    assert handoff.lookup(tmp_path, now=v.valid_until - 1)[0] == v
    assert handoff.lookup(tmp_path, now=v.valid_until)[0] == v
    gone, why = handoff.lookup(tmp_path, now=v.valid_until + 1)
    assert gone is None
    assert why == (
        "https://a.example was last verified 6s ago and its record expired 1s ago: tunnel-check has stopped "
        "re-checking it (docker compose logs tunnel-check)"
    )


def test_an_expired_record_left_by_a_killed_writer_is_not_trusted(tmp_path):
    """A SIGKILLed tunnel-check cannot withdraw; its last record expires on its own."""
    handoff.publish("https://a.example", "i", "cloudflared", 29.0, tmp_path)
    doc = json.loads((tmp_path / HANDOFF_FILE).read_text())
    doc["verified_at"], doc["valid_until"] = time.time() - 60, time.time() - 31
    (tmp_path / HANDOFF_FILE).write_text(json.dumps(doc))
    verified, why = handoff.lookup(tmp_path)
    assert verified is None and "last verified 60s ago" in why and "expired 31s ago" in why


def test_a_record_without_valid_until_is_not_trusted(tmp_path):
    (tmp_path / HANDOFF_FILE).write_text(
        json.dumps({"state": "verified", "url": "https://a.example", "verified_at": time.time()})
    )
    assert handoff.lookup(tmp_path) == (
        None,
        "hand-off record has no valid_until (written by an older tunnel-check): not trusted",
    )


def test_withdrawn_reads_as_none_and_keeps_the_reason(tmp_path):
    handoff.publish("https://a.example", "i", "cloudflared", 10, tmp_path)
    handoff.withdraw("530 error 1033: the tunnel is down", tmp_path)
    assert handoff.lookup(tmp_path) == (None, "withdrawn: 530 error 1033: the tunnel is down")
    raw = handoff.read_raw(tmp_path)
    assert raw["state"] == "withdrawn" and raw["withdrawn_url"] == "https://a.example"


def test_nothing_written(tmp_path):
    assert handoff.lookup(tmp_path) == (None, "no URL verified yet (tunnel-check has published nothing)")
    assert handoff.read_raw(tmp_path) == {}


def test_a_torn_file_is_reported_not_trusted(tmp_path):
    (tmp_path / HANDOFF_FILE).write_text('{"state": "verif')
    verified, why = handoff.lookup(tmp_path)
    assert verified is None and why.startswith(f"hand-off {tmp_path / HANDOFF_FILE} unreadable: JSONDecodeError")
    assert handoff.read_raw(tmp_path)["state"] == "unreadable"


def test_the_directory_comes_from_handoff_dir_when_not_given(tmp_path, monkeypatch):
    monkeypatch.setenv("HANDOFF_DIR", str(tmp_path))
    handoff.publish("https://a.example", "i", "direct", 10)
    assert handoff.lookup(tmp_path)[0].provider == "direct"


def test_the_command_prints_the_verdict_the_services_act_on(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    services = Path(__file__).resolve().parents[3] / "services"

    def verdict():
        out = subprocess.run(
            [sys.executable, "-m", "stack.handoff", str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=30,
            env={"PYTHONPATH": str(services)},
        )
        return out.returncode, json.loads(out.stdout)

    code, doc = verdict()
    assert code == 1 and doc["verified"] is None and doc["record"] == {}
    handoff.publish("https://a.example", "i", "direct", 60, tmp_path)
    code, doc = verdict()
    assert code == 0 and doc["verified"]["url"] == "https://a.example" and doc["no_url_because"] is None
