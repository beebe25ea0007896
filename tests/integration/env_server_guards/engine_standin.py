"""A stand-in for vLLM's chat route (the GPU engine cannot run here): vLLM's wire format with token ids
and `token_id:N` logprobs, and vLLM's 400 shape for a request it rejects, whose message names a
parameter the way a hosted provider's does (vLLM's own 400s echo request content, which is how code in
a sandbox can steer the wording). Records every body it receives, for the test to inspect."""

from __future__ import annotations

import threading
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

POISON_MARKER = "POISON"
POISON_400 = "Unsupported parameter: 'temperature' is not supported with this model."


def make_app(seen: list[dict[str, Any]]) -> FastAPI:
    app = FastAPI()

    @app.get("/v1/models")
    def models() -> dict:
        return {"object": "list", "data": [{"id": "m", "object": "model"}]}

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        body = await request.json()
        seen.append(body)
        if POISON_MARKER in str(body.get("messages")) and "temperature" in body:
            return JSONResponse(
                {"error": {"message": POISON_400, "type": "BadRequestError", "code": 400}}, status_code=400
            )
        n_prompt = 3 + len(body.get("messages") or [])
        ids = [11, 12, 13]
        return {
            "id": "cmpl-1",
            "object": "chat.completion",
            "model": body.get("model"),
            "prompt_token_ids": list(range(1, n_prompt + 1)),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "ok"},
                    "finish_reason": "stop",
                    "token_ids": ids,
                    "logprobs": {"content": [{"token": f"token_id:{i}", "logprob": -0.5} for i in ids]},
                }
            ],
            "usage": {"prompt_tokens": n_prompt, "completion_tokens": 3, "total_tokens": n_prompt + 3},
        }

    return app


def serve(port: int, seen: list[dict[str, Any]]) -> uvicorn.Server:
    server = uvicorn.Server(uvicorn.Config(make_app(seen), host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    return server
