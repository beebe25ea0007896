"""The agent's model layer without litellm (env_server/asyncgrpo_chat_model.py) against the litellm one it replaces.

Runs where both are installed: the env-server image (mini-swe-agent 2.4.6 with the litellm it resolves, OpenEnv,
Harbor). Each run is the real `mini-swe-agent` command line as Harbor 0.25.0 writes it (`-c mini`, the timeout,
the step limit, the session header, api_base), in a subprocess, against env-server's own capture proxy
(OpenEnv's capture app behind our front, `LoopbackHarborService`) in front of a scripted vLLM stand-in:

  - for the same conversation (a tool call, a reply without one: mini-swe-agent's format error, then the
    submission) the proxy records the same allow-listed fields turn by turn with either class, and the engine
    receives the same bodies; the agent ends `Submitted` either way;
  - with our class the agent process never imports litellm (`python -X importtime` lists every module);
  - with our class a run still stops at the step limit, after exactly that many model calls, as with litellm.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import threading
from typing import Any

import pytest
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from support import free_port, wait_until

from env_server import agent_install
from env_server.capture import LoopbackHarborService

SERVED = "m"
STEP_LIMIT = 3
MAX_OUTPUT_TOKENS = 256


def tool_call(call_id: str, command: str) -> list[dict]:
    args = json.dumps({"command": command})
    return [{"id": call_id, "type": "function", "function": {"name": "bash", "arguments": args}}]


def scripted_reply(body: dict, mode: str) -> dict:
    """What the engine says, from the conversation alone (so both runs see the same): a tool call, then a reply
    without one (mini-swe-agent answers with a format error), then the submission; in `loop` mode a tool call
    that never finishes. Message fields as vLLM 0.2x and the mock engine send them."""
    n = len(body["messages"])
    if mode == "loop":
        content, calls = f"Turn {n}.", tool_call(f"chatcmpl-tool-{n}", "echo again")
    elif n <= 2:
        content, calls = "Let me look.", tool_call("chatcmpl-tool-1", "echo hello")
    elif n <= 4:
        content, calls = "I think the answer is done.", []
    else:
        content, calls = "", tool_call("chatcmpl-tool-2", "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")
    ids = [11, 12, 13]
    prompt = list(range(1, 4 + n))
    return {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion",
        "created": 1700000000,
        "model": body.get("model"),
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": content,
                    "refusal": None,
                    "annotations": None,
                    "audio": None,
                    "function_call": None,
                    "tool_calls": calls,
                    "reasoning": None,
                    "reasoning_content": None,
                },
                "logprobs": {"content": [{"token": f"token_id:{i}", "logprob": -0.5} for i in ids]},
                "finish_reason": "tool_calls" if calls else "stop",
                "stop_reason": None,
                "token_ids": ids,
            }
        ],
        "usage": {"prompt_tokens": len(prompt), "completion_tokens": 3, "total_tokens": len(prompt) + 3},
        "prompt_token_ids": prompt,
    }


class Engine:
    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []
        self.mode = "script"
        app = FastAPI()

        @app.get("/v1/models")
        def models() -> dict:
            return {"object": "list", "data": [{"id": SERVED, "object": "model"}]}

        @app.post("/v1/chat/completions")
        async def chat(request: Request) -> Any:
            body = await request.json()
            self.seen.append(body)
            return scripted_reply(body, self.mode)

        self.port = free_port()
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        threading.Thread(target=self.server.run, daemon=True).start()
        wait_until(lambda: self.server.started, 30, "engine stand-in")


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    engine = Engine()
    service = LoopbackHarborService(
        capture_host="127.0.0.1",
        handoff_dir=str(tmp_path_factory.mktemp("handoff")),
        llm_url=f"http://127.0.0.1:{engine.port}/v1",
        model=SERVED,
        datasets=[],
        capture_port=free_port(),
        capture_level="tokens",
        max_output_tokens=MAX_OUTPUT_TOKENS,
    )
    service.start()
    # The model module installed as agent_install installs it: one file, alone on the agent's import path.
    site = tmp_path_factory.mktemp("agent-site")
    shutil.copy(agent_install.MODEL_MODULE, site / agent_install.MODEL_MODULE.name)
    yield engine, service, site
    service._server.should_exit = True
    engine.server.should_exit = True


def run_agent(stack, tmp_path, *, ours: bool, step_limit: int = 0, watch_imports: bool = False):
    """One `mini-swe-agent` run, its command line as Harbor 0.25.0's MiniSweAgent.run() builds it; returns
    (the session's recorded turns, the trajectory, the process's stderr)."""
    engine, service, site = stack
    session = service.capture.app.state.registry.create(capture_level="tokens")
    base = f"http://127.0.0.1:{service.port}/v1"
    tmp_path.mkdir(parents=True, exist_ok=True)
    config = tmp_path / "custom.yaml"
    config.write_text(json.dumps({"agent": {"step_limit": step_limit}}))
    out = tmp_path / "trajectory.json"
    argv = [
        "--yolo",
        f"--model=openai/{SERVED}",
        "--task=Print hello.",
        f"--output={out}",
        "--cost-limit",
        "0",
        *(["--model-class", agent_install.MODEL_CLASS] if ours else []),
        "-c",
        "mini",
        "-c",
        "model.model_kwargs.timeout=3600",
        "-c",
        str(config),
        "-c",
        f"model.model_kwargs.extra_headers.X-Session-ID=trial-{secrets.token_hex(3)}",
        "-c",
        f"model.model_kwargs.api_base={base}",
        "--exit-immediately",
    ]
    # OpenEnv's seam (agent_env) and Harbor's run() environment, nothing of this process's.
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "MSWEA_API_KEY": session.session_id,
        "OPENAI_API_KEY": session.session_id,
        "OPENAI_API_BASE": base,
        "OPENAI_BASE_URL": base,
        "MSWEA_CONFIGURED": "true",
        "MSWEA_COST_TRACKING": "ignore_errors",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "PYTHONPATH": str(site) if ours else "",
    }
    cmd = [sys.executable, "-c", WATCHED if watch_imports else "from minisweagent.run.mini import app; app()", *argv]
    proc = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return service.capture.app.state.registry.get(session.session_id).graph.nodes(), json.loads(out.read_text()), proc


# The agent's process with a finder in front of the import system: every attempt to import litellm or openai
# (at any depth, `import` statement or importlib, caught or not) is refused and written down, and at exit the
# process prints what it tried and whether our class was loaded. (`-X importtime` cannot show this: it does not
# list modules loaded through importlib.import_module, which is how mini-swe-agent loads a model class.)
WATCHED = """
import atexit, importlib.abc, json, sys
tried = []
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("litellm", "openai"):
            tried.append(name)
            raise ModuleNotFoundError(name)
sys.meta_path.insert(0, Refuse())
atexit.register(lambda: print("IMPORTS " + json.dumps({"tried": tried, "ours": "asyncgrpo_chat_model" in sys.modules}),
                              file=sys.stderr))
from minisweagent.run.mini import app
app()
"""

RECORDED = ("model", "n_tools", "request_messages", "request_tools", "sampling_params", "requested_sampling_params")


def recorded(nodes) -> list[dict]:
    return [{field: getattr(node, field) for field in RECORDED} for node in nodes]


def test_the_proxy_records_the_same_fields_with_either_class(stack, tmp_path):
    engine = stack[0]
    engine.mode = "script"
    engine.seen.clear()
    lit_nodes, lit_traj, _ = run_agent(stack, tmp_path / "litellm", ours=False)
    lit_bodies = list(engine.seen)
    engine.seen.clear()
    our_nodes, our_traj, _ = run_agent(stack, tmp_path / "ours", ours=True)
    our_bodies = list(engine.seen)

    assert len(lit_nodes) == 3, recorded(lit_nodes)  # tool call, format error, submission
    for turn, (lit, ours) in enumerate(zip(recorded(lit_nodes), recorded(our_nodes), strict=True)):
        for field in RECORDED:
            assert ours[field] == lit[field], (turn, field)
    assert our_bodies == lit_bodies
    # What the agent keeps as history: the assistant turns it sends back, every key and None as litellm's.
    lit_msgs = [{k: v for k, v in m.items() if k != "extra"} for m in lit_traj["messages"]]
    our_msgs = [{k: v for k, v in m.items() if k != "extra"} for m in our_traj["messages"]]
    assert our_msgs == lit_msgs
    assert [m["role"] for m in our_msgs] == ["system", "user", "assistant", "tool", "user", "assistant", "tool", "exit"]
    assert lit_traj["info"]["exit_status"] == our_traj["info"]["exit_status"] == "Submitted"
    assert our_traj["info"]["config"]["model"]["model_name"] == f"openai/{SERVED}"
    assert our_traj["info"]["model_stats"] == lit_traj["info"]["model_stats"] == {"instance_cost": 0.0, "api_calls": 3}


def test_the_agent_with_our_class_never_imports_litellm(stack, tmp_path):
    stack[0].mode = "script"
    _, traj, proc = run_agent(stack, tmp_path, ours=True, watch_imports=True)
    (line,) = [x for x in proc.stderr.splitlines() if x.startswith("IMPORTS ")]
    assert json.loads(line[len("IMPORTS ") :]) == {"tried": [], "ours": True}
    assert traj["info"]["exit_status"] == "Submitted"
    assert traj["info"]["config"]["model_type"] == agent_install.MODEL_CLASS


def test_the_import_watch_sees_litellms_class_import_it(stack, tmp_path):
    """The watch itself: with mini-swe-agent's default class the same run tries litellm (and fails on it)."""
    stack[0].mode = "script"
    with pytest.raises(AssertionError, match="ModuleNotFoundError: litellm"):
        run_agent(stack, tmp_path, ours=False, watch_imports=True)


@pytest.mark.parametrize("ours", [False, True], ids=["litellm", "ours"])
def test_a_run_stops_at_the_step_limit(stack, tmp_path, ours):
    engine = stack[0]
    engine.mode = "loop"
    engine.seen.clear()
    try:
        nodes, traj, _ = run_agent(stack, tmp_path, ours=ours, step_limit=STEP_LIMIT)
    finally:
        engine.mode = "script"
    assert traj["info"]["exit_status"] == "LimitsExceeded"
    assert len(engine.seen) == len(nodes) == traj["info"]["model_stats"]["api_calls"] == STEP_LIMIT


class StatusEngine:
    """Answers each call with the next status of a plan (then the scripted reply), counting the calls."""

    def __init__(self) -> None:
        self.plan: list[tuple[int, str]] = []
        self.calls = 0
        app = FastAPI()

        @app.post("/v1/chat/completions")
        async def chat(request: Request) -> Any:
            body = await request.json()
            self.calls += 1
            if self.plan:
                status, message = self.plan.pop(0)
                return JSONResponse({"error": {"message": message, "type": "x", "code": status}}, status_code=status)
            return scripted_reply(body, "loop")

        self.port = free_port()
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        threading.Thread(target=self.server.run, daemon=True).start()
        wait_until(lambda: self.server.started, 30, "status engine")


# (plan of refusals, calls made, whether mini-swe-agent's retry() gives up at once), for ONE retry() attempt:
# what litellm's OpenAI client retries by itself, and which refusals litellm maps to an abort exception.
STATUS_CASES = {
    "500 x3": ([(500, "boom")] * 3, 3, False),
    "429 x3": ([(429, "slow down")] * 3, 3, False),
    "503 then ok": ([(503, "starting")], 2, None),
    "401": ([(401, "unknown API key")], 1, True),
    "403": ([(403, "no")], 1, False),  # litellm: APIError, retried
    "404": ([(404, "no route")], 1, True),
    "400": ([(400, "bad field")], 1, False),
    "400 context": (
        [(400, "This model's maximum context length is 32768 tokens. However, you requested 40000")],
        1,
        True,
    ),
    "413": ([(413, "too large")], 1, False),
}


@pytest.fixture(scope="module")
def status_engine(stack):
    sys.path.insert(0, str(stack[2]))  # the model module, installed alone as in the sandbox
    engine = StatusEngine()
    yield engine
    engine.server.should_exit = True


@pytest.mark.parametrize("case", list(STATUS_CASES))
def test_retries_and_aborts_match_litellms(status_engine, monkeypatch, case):
    from asyncgrpo_chat_model import CaptureChatModel  # noqa: I001 -- on the path via PYTHONPATH below
    from minisweagent.models.litellm_model import LitellmModel

    monkeypatch.setenv("MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT", "1")  # one retry() attempt: the client's own retries
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    base = f"http://127.0.0.1:{status_engine.port}/v1"
    plan, calls, aborts = STATUS_CASES[case]
    for cls in (LitellmModel, CaptureChatModel):
        model = cls(
            model_name=f"openai/{SERVED}",
            model_kwargs={"api_base": base, "api_key": "k", "timeout": 60},
            cost_tracking="ignore_errors",
        )
        status_engine.plan, status_engine.calls = list(plan), 0
        try:
            model.query([{"role": "user", "content": "hi"}])
            raised = None
        except Exception as exc:  # noqa: BLE001 -- which exception is the point
            raised = exc
        assert status_engine.calls == calls, (cls.__name__, case)
        if aborts is None:
            assert raised is None, (cls.__name__, raised)
        else:
            assert raised is not None and isinstance(raised, tuple(model.abort_exceptions)) == aborts, (
                cls.__name__,
                raised,
            )
