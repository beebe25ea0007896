"""The rest of the stack runs unchanged against the mock: OpenEnv's real capture proxy stitches a
multi-turn agent conversation through it into one trainable sequence, with no forks."""

import threading

import pytest
import requests
from mock_engine_support import BASH_TOOL, SCRIPT_MATCH, SERVED
from support import free_port, wait_until


@pytest.fixture(scope="module")
def proxy(engine):
    import uvicorn
    from openenv.core.harness.capture.server import create_app

    app = create_app(llm_url=f"{engine}/v1", model=SERVED, max_output_tokens=256)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    wait_until(lambda: requests.get(f"{base}/health", timeout=2).ok, 60, "capture proxy /health")
    yield base, app
    server.should_exit = True
    thread.join(timeout=10)


def test_a_three_turn_conversation_exports_as_one_trainable_sequence(proxy):
    base, app = proxy
    session = app.state.registry.create(capture_level="tokens")
    headers = {"Authorization": f"Bearer {session.session_id}"}
    messages = [
        {"role": "system", "content": "You are a helpful assistant that can interact with a computer."},
        {"role": "user", "content": f"Please solve this issue: {SCRIPT_MATCH} fix the build"},
    ]
    for turn in range(3):
        resp = requests.post(
            f"{base}/v1/chat/completions",
            headers=headers,
            timeout=120,
            json={"model": SERVED, "messages": messages, "tools": [BASH_TOOL], "seed": 4242 + turn},
        )
        assert resp.status_code == 200, resp.text
        message = resp.json()["choices"][0]["message"]
        messages.append({k: message[k] for k in ("role", "content", "tool_calls") if message.get(k) is not None})
        if message.get("tool_calls"):
            messages.append({"role": "tool", "tool_call_id": message["tool_calls"][0]["id"], "content": "done"})
        else:
            messages.append({"role": "user", "content": "Format error: use the bash tool."})
    doc = requests.get(f"{base}/sessions/{session.session_id}/rollout", timeout=30).json()
    assert doc["trainable"] is True, doc.get("validation")
    assert doc["stats"]["n_turns"] == 3 and doc["stats"]["n_forks"] == 0 and doc["stats"]["n_roots"] == 1
    agent = [s for s in doc["sequences"] if s["role"] == "agent"]
    assert len(agent) == 1 and agent[0]["n_turns"] == 3
    assert sum(agent[0]["loss_mask"]) == sum(agent[0]["turn_lengths"]) > 0
