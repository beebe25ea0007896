"""tunnel-check never dies from one bad iteration, and refuses a URL it could never check at start.

Why: a DIRECT_URL with a bad port makes httpx raise InvalidURL inside the loop; an exception that ended
the process would leave the env server withdrawing the URL within its bound, and every rollout refused
with nothing left to bring the check back.
"""

import logging

import pytest

from stack import handoff
from stack.env import EnvError
from stack.readers import tunnel_check as settings
from tunnel_check import monitor as monitor_mod
from tunnel_check import probe
from tunnel_check.monitor import CHECK_CRASHED, Monitor

URL = "http://172.17.0.1:8100"


class Scripted:
    """Discovery whose `current` follows a script: a URL, or an exception to raise."""

    def __init__(self, script):
        self.script = list(script)

    def current(self, timeout_s):
        item = self.script.pop(0)
        if isinstance(item, BaseException):
            raise item
        return item, None

    def hint(self, timeout_s):
        return ""

    def renew(self):
        pass

    def close(self):
        pass


def make(tmp_path, script, monkeypatch):
    s = settings.load(
        {
            "TUNNEL_PROVIDER": "direct",
            "DIRECT_URL": URL,
            "HANDOFF_DIR": str(tmp_path),
            "TUNNEL_CHECK_INTERVAL_S": "1",
            "TUNNEL_CHECK_TIMEOUT_S": "0.5",
            "TUNNEL_CHECK_FAILURES_TO_WITHDRAW": "2",
        }
    )
    # The local /health and the request through the URL are the probe module's (tested elsewhere);
    # here they always succeed, so only the scripted discovery decides.
    monkeypatch.setattr(probe, "local_instance", lambda *a, **k: ("i1", None))
    monkeypatch.setattr(monitor_mod.probe, "through", lambda url, inst, *a, **k: probe.ok(url, inst))
    return Monitor(s, discovery=Scripted(script))


def test_an_exception_in_a_check_is_a_failed_check_and_the_loop_goes_on(tmp_path, monkeypatch, caplog):
    m = make(tmp_path, [URL, RuntimeError("boom"), URL, KeyError("x"), ValueError("y"), URL], monkeypatch)
    caplog.set_level(logging.ERROR, logger="tunnel_check")
    m.step()
    assert handoff.lookup(tmp_path)[0].url == URL
    m.step()  # one crash: counted as 1 of 2 failures, still published
    assert m.last.cause == CHECK_CRASHED and "RuntimeError: boom" in m.last.detail
    assert handoff.lookup(tmp_path)[0].url == URL
    assert "check crashed: RuntimeError: boom (at test_loop_survives.py:" in caplog.text
    assert "the loop goes on" in caplog.text
    m.step()  # verified again: the count resets
    m.step()
    m.step()  # two consecutive crashes withdraw the URL within the bound, as any failure would
    assert handoff.lookup(tmp_path)[0] is None
    assert "check crashed" in handoff.read_raw(tmp_path)["reason"]
    m.step()  # and the next good check publishes again
    assert handoff.lookup(tmp_path)[0].url == URL


def test_run_keeps_looping_through_crashes_until_stopped(tmp_path, monkeypatch):
    crashes = [RuntimeError(f"crash {i}") for i in range(3)]
    m = make(tmp_path, [*crashes, URL, URL], monkeypatch)
    m.s = settings.load(
        {
            **{k: str(v) for k, v in {"TUNNEL_PROVIDER": "direct", "DIRECT_URL": URL}.items()},
            "HANDOFF_DIR": str(tmp_path),
            "TUNNEL_CHECK_INTERVAL_S": "0.2",
            "TUNNEL_CHECK_TIMEOUT_S": "0.1",
        }
    )
    calls = []
    original = m.step

    def counted():
        calls.append(1)
        original()
        if len(calls) == 4:
            m.stop()

    m.step = counted
    m.run()  # returns (stopped), never raises
    assert len(calls) == 4
    # It published after the crashes, then withdrew on the orderly stop.
    assert "tunnel-check stopped" in handoff.read_raw(tmp_path)["reason"]


@pytest.mark.parametrize(
    "env, fix",
    [
        ({"TUNNEL_PROVIDER": "direct", "DIRECT_URL": "http://172.17.0.1:99999"}, "is not a usable URL"),
        ({"TUNNEL_PROVIDER": "direct", "DIRECT_URL": "http://bad host:8100"}, "is not a valid hostname label"),
        (
            {"TUNNEL_PROVIDER": "direct", "DIRECT_URL": "ftp://172.17.0.1:8100"},
            "is not an http(s) URL: set DIRECT_URL with its scheme",
        ),
        ({"TUNNEL_PROVIDER": "direct", "DIRECT_URL": "http://u:p@172.17.0.1:8100"}, "credentials"),
        ({"TUNNEL_PROVIDER": "direct", "DIRECT_URL": URL, "CAPTURE_HOST": "local_host!"}, "CAPTURE_HOST="),
        ({"TUNNEL_PROVIDER": "gradio", "GRADIO_SHARE_SERVER": "frps.example.com"}, "is not host:port"),
        (
            {"TUNNEL_PROVIDER": "cloudflared", "TUNNEL_NAMED": "1", "TUNNEL_HOSTNAME": "capture_.example.com"},
            "TUNNEL_HOSTNAME='capture_.example.com' is not a hostname",
        ),
    ],
)
def test_urls_are_refused_at_start_in_one_line(env, fix):
    with pytest.raises(EnvError) as err:
        settings.load({"TUNNEL_METRICS_PORT": "20241", **env})
    assert fix in str(err.value) and "\n" not in str(err.value)


def test_good_urls_pass():
    assert settings.load({"TUNNEL_PROVIDER": "direct", "DIRECT_URL": "https://[::1]:8100"}).direct_url
    assert settings.load({"TUNNEL_PROVIDER": "gradio", "GRADIO_SHARE_SERVER": "frps.example.com:7000"})
    s = settings.load({"TUNNEL_PROVIDER": "cloudflared", "TUNNEL_NAMED": "1", "TUNNEL_HOSTNAME": "cap.example.com"})
    assert s.named
