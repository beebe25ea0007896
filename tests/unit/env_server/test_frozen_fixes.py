"""A vLLM 400 that names a parameter teaches the frozen client nothing (OpenEnv's own client learns a fix
that every later call then carries, which is the attack). The engine here is httpx's MockTransport, a
stand-in for vLLM's 400 wire format (no engine runs in unit tests)."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from openenv.core.harness.capture.upstream import InferenceClient, UpstreamHTTPError

from env_server.frozen_fixes import FrozenInferenceClient

POISON = "Unsupported parameter: 'temperature' is not supported with this model."


def engine(request: httpx.Request) -> httpx.Response:
    import json

    body = json.loads(request.content)
    if "POISON" in str(body.get("messages")) and "temperature" in body:
        return httpx.Response(400, json={"error": {"message": POISON, "code": "unsupported_parameter"}})
    return httpx.Response(200, json={"choices": [{"message": {"content": "ok"}}], "sent": body})


def client(cls):
    c = cls("http://engine", served_model="m", capture_level="text")
    c._client = httpx.AsyncClient(base_url="http://engine/v1", transport=httpx.MockTransport(engine))
    return c


def run(c, content):
    return asyncio.run(c._post("/chat/completions", {"messages": [{"content": content}], "temperature": 0.7}))


def test_openenvs_own_client_learns_a_permanent_fix_from_a_crafted_400():
    c = client(InferenceClient)
    run(c, "POISON")
    assert [str(f) for f in c.param_fixes] == ["dropped temperature"]
    assert "temperature" not in run(c, "an honest turn")["sent"]


def test_the_frozen_client_returns_the_400_and_keeps_the_temperature():
    c = client(FrozenInferenceClient)
    with pytest.raises(UpstreamHTTPError, match="upstream returned 400: Unsupported parameter"):
        run(c, "POISON")
    assert c.param_fixes == []
    assert run(c, "an honest turn")["sent"]["temperature"] == 0.7
