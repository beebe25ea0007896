"""The monitor's state machine: publish on a verified check, withdraw after N consecutive failures,
publish a new URL as soon as it verifies. Verdicts are fed directly (the checks themselves are
covered by test_probe and the integration suite); the hand-off is the real one in a temp folder."""

from stack import handoff
from stack.readers import tunnel_check as settings
from tunnel_check import probe
from tunnel_check.monitor import Monitor


class Renewals:
    """Counts renew() calls; the monitor only calls renew/close/current/hint on its discovery."""

    def __init__(self):
        self.renewed = 0

    def renew(self):
        self.renewed += 1

    def close(self):
        pass


def make(tmp_path, failures=2):
    s = settings.load(
        {
            "TUNNEL_PROVIDER": "cloudflared",
            "TUNNEL_METRICS_PORT": "20241",
            "HANDOFF_DIR": str(tmp_path),
            "TUNNEL_CHECK_INTERVAL_S": "1",
            "TUNNEL_CHECK_TIMEOUT_S": "0.5",
            "TUNNEL_CHECK_FAILURES_TO_WITHDRAW": str(failures),
        }
    )
    m = Monitor(s, discovery=Renewals())
    return m


OLD, NEW = "https://old-words-here.trycloudflare.com", "https://new-words-here.trycloudflare.com"
PAGE = probe.fail(probe.PROVIDER_PAGE, "HTTP 530, Cloudflare error 1033", OLD)


def test_publish_then_withdraw_after_n_failures_then_publish_new_url(tmp_path):
    m = make(tmp_path, failures=2)
    m.apply(probe.ok(OLD, "i1"))
    assert handoff.lookup(tmp_path)[0].url == OLD
    assert handoff.lookup(tmp_path)[0].provider == "cloudflared-quick"

    m.apply(PAGE)
    assert handoff.lookup(tmp_path)[0].url == OLD  # one failure is not enough
    m.apply(PAGE)
    assert handoff.lookup(tmp_path)[0] is None
    raw = handoff.read_raw(tmp_path)
    assert raw["withdrawn_url"] == OLD and "error 1033" in raw["reason"] and "2 consecutive" in raw["reason"]
    assert m.discovery.renewed == 1

    m.apply(probe.fail(probe.UNRESOLVABLE, "new-words-here does not resolve", NEW))
    assert handoff.lookup(tmp_path)[0] is None
    m.apply(probe.ok(NEW, "i1"))
    assert handoff.lookup(tmp_path)[0].url == NEW


def test_a_success_between_failures_resets_the_count(tmp_path):
    m = make(tmp_path, failures=2)
    m.apply(probe.ok(OLD, "i1"))
    m.apply(PAGE)
    m.apply(probe.ok(OLD, "i1"))
    m.apply(PAGE)
    assert handoff.lookup(tmp_path)[0].url == OLD


def test_url_change_while_published_is_followed_at_once(tmp_path):
    m = make(tmp_path)
    m.apply(probe.ok(OLD, "i1"))
    m.apply(probe.ok(NEW, "i1"))
    assert handoff.lookup(tmp_path)[0].url == NEW


def test_unpublished_backoff_grows_to_the_interval_and_resets_for_a_new_url(tmp_path):
    import time

    m = make(tmp_path)
    now = time.monotonic()
    delays = []
    for _ in range(4):
        m.apply(probe.fail(probe.UNRESOLVABLE, "x", NEW))
        delays.append(round(m.delay_after(now + 100) - 100, 1))
    assert delays == [0.5, 1.0, 1.0, 1.0]  # capped at interval=1
    m.apply(probe.fail(probe.UNRESOLVABLE, "x", OLD))
    assert m.attempts == 1
