"""scripts/status reads the hand-off through the shared package: the same verdict env-server acts on."""

from __future__ import annotations

import json
import time

from stack import handoff
from stack.facts import HANDOFF_FILE
from stackstatus import report


def test_status_reports_an_expired_record_as_no_url(tmp_path, monkeypatch):
    status = report
    asked = []
    monkeypatch.setattr(status, "sh", lambda args, timeout=20: asked.append(args) or f"{tmp_path}\n")
    handoff.publish("https://a.example", "inst", "cloudflared-quick", 29.0, tmp_path)
    live = status.handoff("proj")
    assert asked[0][-1] == "proj_handoff"
    assert live["trusted"] is True and live["untrusted_reason"] == "" and 28 < live["valid_for_s"] <= 29

    doc = json.loads((tmp_path / HANDOFF_FILE).read_text())
    doc["valid_until"] = time.time() - 10
    (tmp_path / HANDOFF_FILE).write_text(json.dumps(doc))
    expired = status.handoff("proj")
    assert expired["trusted"] is False and "its record expired 10s ago" in expired["untrusted_reason"]
    line = status.human(
        {
            "project": "proj",
            "at": "now",
            "services": {},
            "tunnel": expired,
            "engine": {"capture_level": "not running"},
            "env_server": {"error": "not running"},
            "training": {"missing": "none"},
            "gpus": [],
        }
    )
    assert "tunnel      https://a.example  NOT TRUSTED: https://a.example was last verified" in line
