"""Hub publishing against a local stand-in of the Hub's HTTP API (tests/standins/hub.py), with the REAL
huggingface_hub client: the push lands, a failing Hub is retried and then reported, never raised into
the caller, and `submit` never waits for the network."""

import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "standins"))
from hub import HubStandin  # noqa: E402

from stack.readers.trainer import HubSettings  # noqa: E402
from trainer.hub.publish import HubPublisher, Job  # noqa: E402


@pytest.fixture
def folder(tmp_path):
    ckpt = tmp_path / "run-1" / "checkpoint-2"
    ckpt.mkdir(parents=True)
    (ckpt / "config.json").write_text('{"model_type": "tiny"}')
    (ckpt / "model.safetensors").write_bytes(b"\0" * 4096)
    (ckpt / "optimizer.pt").write_bytes(b"resume state, not model")
    return ckpt


def publisher(hub, **kw):
    states = []
    settings = HubSettings(model_id="me/tiny", token="tok", endpoint=hub.url, retry_s=0.0, **kw)
    return HubPublisher(settings, on_state=states.append, say=lambda line: None), states


def test_push_lands_with_card_and_without_resume_state(tmp_path, folder):
    with HubStandin(tmp_path / "hub", token="tok") as hub:
        pub, states = publisher(hub)
        pub.submit(Job(folder=folder, label="checkpoint-2", card="---\nbase_model: x\n---\n# card\n"))
        assert pub.wait(120)
        pub.close()
    repo = tmp_path / "hub" / "me" / "tiny"
    assert sorted(p.name for p in repo.iterdir()) == ["README.md", "config.json", "model.safetensors"]
    assert (repo / "README.md").read_text().startswith("---\nbase_model: x")
    assert hub.created == [{"name": "tiny", "organization": "me", "visibility": "private"}]
    assert states[-1]["state"] == "pushed" and states[-1]["pushed"] == ["checkpoint-2"]


def test_outage_is_retried_then_reported_never_raised(tmp_path, folder):
    with HubStandin(tmp_path / "hub", token="tok", fail_next=10**6) as hub:
        pub, states = publisher(hub, attempts=3)
        t0 = time.monotonic()
        pub.submit(Job(folder=folder, label="final", final=True))
        assert time.monotonic() - t0 < 1.0  # the caller (a training step) never waits on the Hub
        assert pub.wait(300)
        pub.close()
    seen = [s["state"] for s in states]
    assert seen.count("retrying") == 2 and seen[-1] == "failed", seen
    assert states[-1]["attempt"] == 3 and "500" in states[-1]["last_error"]
    assert "scripts/publish run-1" in states[-1]["fix"]


def test_outage_that_ends_is_pushed_on_a_retry(tmp_path, folder):
    with HubStandin(tmp_path / "hub", token="tok", fail_next=1) as hub:
        pub, states = publisher(hub, attempts=3)
        pub.submit(Job(folder=folder, label="final", final=True))
        assert pub.wait(300)
        pub.close()
    seen = [s["state"] for s in states]
    assert "retrying" in seen and seen[-1] == "pushed", seen
    assert (tmp_path / "hub" / "me" / "tiny" / "model.safetensors").stat().st_size == 4096


def test_newer_checkpoint_supersedes_a_waiting_one_but_never_the_final(tmp_path, folder):
    gate = threading.Event()
    with HubStandin(tmp_path / "hub", token="tok") as hub:
        pub, states = publisher(hub)
        real_push = pub.push
        pub.push = lambda job: (gate.wait(60), real_push(job))[1]
        pub.submit(Job(folder=folder, label="checkpoint-1"))
        time.sleep(0.5)  # checkpoint-1 is now uploading (held at the gate)
        pub.submit(Job(folder=folder, label="final", final=True))
        pub.submit(Job(folder=folder, label="checkpoint-3"))
        pub.submit(Job(folder=folder, label="checkpoint-4"))
        assert states[-1]["pending"] == ["final", "checkpoint-4"]
        gate.set()
        assert pub.wait(120)
        pub.close()
    assert states[-1]["pushed"] == ["checkpoint-1", "final", "checkpoint-4"]
