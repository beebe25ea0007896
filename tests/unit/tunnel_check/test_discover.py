"""URL discovery for the named cloudflared tunnel and the gradio provider (OpenEnv's real GradioForwarder; its
share server cannot be reached from here, which is the failure under test)."""

import httpx

from stack.readers.tunnel_check import load
from tunnel_check import probe
from tunnel_check.discover import Discovery


def no_http(request):
    raise AssertionError(f"a named tunnel's URL is fixed by DNS; nothing should be asked ({request.url})")


def test_a_named_tunnel_is_its_hostname_without_asking_anything():
    settings = load({"TUNNEL_PROVIDER": "cloudflared", "TUNNEL_HOSTNAME": "agent.example.com", "TUNNEL_TOKEN": "t"})
    assert (settings.named, settings.mode) == (True, "cloudflared-named")
    discovery = Discovery(settings, client=httpx.Client(transport=httpx.MockTransport(no_http)))
    assert discovery.current(timeout_s=2) == ("https://agent.example.com", None)


def test_a_gradio_share_that_cannot_open_is_one_failed_check_naming_what_it_needs():
    discovery = Discovery(load({"TUNNEL_PROVIDER": "gradio", "GRADIO_SHARE_SERVER": "127.0.0.1:1"}))
    for _ in range(2):  # nothing half-open is kept: the next check tries again
        url, verdict = discovery.current(timeout_s=2)
        assert url is None and (verdict.ok, verdict.cause) == (False, probe.NO_URL), verdict
        assert verdict.detail.startswith("no URL announced: gradio share link did not open: "), verdict.detail
        assert verdict.detail.endswith(
            " (gradio share needs outbound HTTPS to api.gradio.app and its share server, or your own frps in "
            "GRADIO_SHARE_SERVER)"
        ), verdict.detail
        assert discovery._forwarder is None
