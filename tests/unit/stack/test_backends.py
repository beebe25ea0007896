"""Sandbox backends and tunnel providers are tables (stack/backends.py): an unknown name is one line that
lists the known ones, and a backend's sandboxes are reaped by its own reaper, never another backend's."""

from __future__ import annotations

import sys

import pytest

from stack import backends
from stack.backends import SANDBOXES, TUNNEL_PROVIDERS, SandboxBackend
from stack.env import Env, EnvError
from stack.fields import SANDBOX, TUNNEL_PROVIDER

REAPED: list[tuple[str, str]] = []


def reap_fake(prefix: str) -> tuple[int, list[str]]:
    REAPED.append(("fake", prefix))
    return 3, []


def test_an_unknown_name_is_one_line_listing_the_known_ones():
    with pytest.raises(EnvError) as info:
        Env({"SANDBOX": "modal"}).get(SANDBOX)
    assert str(info.value) == (
        "SANDBOX='modal' is not allowed: set SANDBOX to one of: e2b (production, E2B's cloud), docker (local "
        "sandboxes on this host) (default e2b)"
    )
    with pytest.raises(EnvError) as info:
        TUNNEL_PROVIDERS.get("ngrok")
    assert str(info.value).startswith(
        "TUNNEL_PROVIDER='ngrok' is not a known tunnel provider: set TUNNEL_PROVIDER to one of: cloudflared ("
    )
    assert "\n" not in str(info.value)
    assert Env({"TUNNEL_PROVIDER": "Cloudflare"}).get(TUNNEL_PROVIDER) == "cloudflared"
    assert TUNNEL_PROVIDERS.get("cloudflare").name == "cloudflared"


def test_each_backend_names_what_it_needs():
    e2b, docker = SANDBOXES.get("e2b"), SANDBOXES.get("docker")
    assert e2b.credentials_set(Env({"E2B_API_KEY": "e2b_x"})) == ("E2B_API_KEY",)
    assert e2b.missing_credentials(()) == (
        "SANDBOX=e2b needs E2B_API_KEY: put your key in .env (E2B_API_KEY=e2b_..., from your E2B dashboard), or "
        "use SANDBOX=docker"
    )
    assert docker.missing_credentials(()) is None and docker.host_docker and not e2b.host_docker
    assert [p.compose_profile for p in TUNNEL_PROVIDERS] == ["cloudflared", "", ""]


def test_a_third_backend_is_reaped_by_its_own_reaper_or_not_at_all(monkeypatch):
    from env_server import sandboxes

    def e2b_must_not_run(prefix):
        raise AssertionError("E2B's reaper ran for another backend's sandboxes")

    monkeypatch.setattr(sandboxes, "reap_e2b", e2b_must_not_run)
    module = sys.modules[__name__].__name__
    monkeypatch.setitem(SANDBOXES.entries, "fake", SandboxBackend("fake", "a test's", reaper=f"{module}:reap_fake"))
    monkeypatch.setitem(SANDBOXES.entries, "bare", SandboxBackend("bare", "a test's, no reaper"))
    REAPED.clear()
    assert (
        sandboxes.reap("fake", "stack-") == "reaped    3 fake sandbox(es) an earlier run of stack 'stack-' left behind"
    )
    assert REAPED == [("fake", "stack-")]
    assert sandboxes.reap("bare", "stack-") == (
        "reaped    nothing: the bare backend names no reaper, so earlier sandboxes were not looked for"
    )
    assert backends.load("env_server.sandboxes:trial_prefix") is sandboxes.trial_prefix
