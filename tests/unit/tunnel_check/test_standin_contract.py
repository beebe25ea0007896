"""The stand-in announces itself in formats tunnel-check's parser reads the way it reads cloudflared,
and refuses to listen on every interface."""

import io

import pytest

from tunnel_check import logparse
from tunnel_standin import address
from tunnel_standin.announce import Announcer


def test_banner_in_logfile_json_and_console_is_parsed(tmp_path):
    logfile = tmp_path / "cloudflared.log"
    out = io.StringIO()
    say = Announcer(str(logfile), out)
    say.banner("http://172.17.0.1:18123")
    say.log(
        "info",
        "Registered tunnel connection",
        connIndex=0,
        connection="c0ffee",
        event=0,
        ip="127.0.0.1",
        location="local",
        protocol="http",
    )
    from_file = logparse.parse_file(logfile)
    from_console = logparse.parse_lines(out.getvalue().splitlines())
    for state in (from_file, from_console):
        assert state.url == "http://172.17.0.1:18123"
        assert state.registered == 1


@pytest.mark.parametrize("value", ["0.0.0.0", "::", "*"])
def test_wildcard_listen_address_is_refused(value):
    with pytest.raises(address.AddressError, match="every interface"):
        address.listen_host(value)


def test_explicit_address_is_kept_and_garbage_refused():
    assert address.listen_host("172.17.0.1") == "172.17.0.1"
    with pytest.raises(address.AddressError, match="not an IP address"):
        address.listen_host("docker0")


def test_missing_bridge_names_the_setting():
    with pytest.raises(address.AddressError, match="STANDIN_LISTEN_HOST"):
        address.listen_host("", bridge="no-such-if0")
