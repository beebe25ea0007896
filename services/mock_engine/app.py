"""The mock engine's HTTP surface: vLLM's OpenAI-compatible routes and the dev routes TRL calls.

Response shapes follow vLLM 0.31 served with `--return-tokens-as-token-ids --logprobs-mode
processed_logprobs --enable-auto-tool-choice --tool-call-parser hermes` and `VLLM_SERVER_DEV_MODE=1`:
top-level `prompt_token_ids` on chat (per choice on completions), per-choice `token_ids` (with the
end-of-turn token, as vLLM), logprob entries whose token reads `token_id:N`, tool calls parsed from the
generated text. Streaming is not offered (OpenEnv's capture proxy calls the engine non-streaming).
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse

from mock_engine import faults as faults_mod
from mock_engine import toolcalls
from mock_engine.lm import Generation, Sampling, TinyLM, WeightUpdateError
from mock_engine.metrics import EngineMetrics
from mock_engine.script import Script

# The generation-config fields vLLM 0.31 (`--generation-config auto`, the default) turns into default
# sampling for requests that leave them unset: the ones that truncate the distribution.
GENERATION_DEFAULTS = ("top_k", "top_p", "min_p")


def generation_defaults(model_dir: str) -> dict:
    """What the model folder's generation_config.json sets of GENERATION_DEFAULTS (vLLM reads only the
    fields the file states, not transformers' class defaults such as top_k=50)."""
    path = Path(model_dir) / "generation_config.json"
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {k: doc[k] for k in GENERATION_DEFAULTS if doc.get(k) is not None}


def stop_plan(tokenizer, model_dir: str, setting: str):
    """The stop set under TURN_END_TOKENS (`setting`), from the model folder's generation_config.json and
    the chat template, by the engine launcher's own rules (stack/serving/turn_end.py): the mock stops where vLLM
    launched by services/engine would."""
    from stack.serving import turn_end

    try:
        config_eos = json.loads((Path(model_dir) / "generation_config.json").read_text()).get("eos_token_id")
    except (OSError, ValueError):
        config_eos = None
    return turn_end.plan_for_tokenizer(tokenizer, config_eos, turn_end.parse_setting(setting))


@dataclass
class Settings:
    model_dir: str
    served_name: str
    max_model_len: int
    max_new_tokens: int
    # vLLM's --max-num-seqs: generations admitted at once; more wait (vllm:num_requests_waiting).
    max_num_seqs: int = 8
    # Applied to requests that do not set them, as vLLM applies the model's generation config.
    sampling_defaults: dict = field(default_factory=dict)
    # MOCK_CHAT_RULES: "chatml" (the mock's own rules; a call is kept only when it round-trips) or "qwen3"
    # (Qwen3's thinking rules, messages as vLLM hands them to the template, replies split as vLLM's hermes
    # parser splits them: mock_engine/tokenizer.py, mock_engine/toolcalls.py).
    chat_rules: str = "chatml"
    # CHAT_TEMPLATE_KWARGS, as vLLM's --default-chat-template-kwargs: under a request's own.
    template_kwargs: dict = field(default_factory=dict)


class BadRequest(Exception):
    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


def _error(message: str, status: int) -> JSONResponse:
    kind = "BadRequestError" if status < 500 else "InternalServerError"
    if status == 404:
        kind = "NotFoundError"
    return JSONResponse({"error": {"message": message, "type": kind, "param": None, "code": status}}, status)


def create_app(settings: Settings, lm: TinyLM, script: Script | None, faults: faults_mod.Faults) -> FastAPI:
    app = FastAPI(title="mock engine (vLLM wire format)")
    app.state.faults = faults
    app.state.lm = lm
    metrics = app.state.metrics = EngineMetrics(settings.served_name, settings.max_num_seqs, settings.max_model_len)
    started = int(time.time())

    @app.exception_handler(BadRequest)
    async def _bad_request(_req: Request, exc: BadRequest):
        return _error(str(exc), exc.status)

    # ---- liveness and introspection -------------------------------------------------------------
    @app.get("/health")
    def health():
        return JSONResponse({}, 200)

    @app.get("/metrics")
    def prometheus_metrics():
        return PlainTextResponse(metrics.render(), media_type="text/plain; version=0.0.4")

    @app.get("/v1/models")
    def models():
        return {
            "object": "list",
            "data": [
                {
                    "id": settings.served_name,
                    "object": "model",
                    "created": started,
                    "owned_by": "vllm",
                    "root": settings.model_dir,
                    "parent": None,
                    "max_model_len": settings.max_model_len,
                    "permission": [],
                }
            ],
        }

    @app.get("/server_info")
    def server_info():
        return {
            "vllm_config": {
                "model_config": {
                    "model": settings.model_dir,
                    "dtype": "torch.float32",
                    "max_model_len": settings.max_model_len,
                    "logprobs_mode": "processed_logprobs",
                },
                "parallel_config": {"tensor_parallel_size": 1, "data_parallel_size": 1, "pipeline_parallel_size": 1},
                "lora_config": None,
            }
        }

    # ---- generation -----------------------------------------------------------------------------
    def _guard(body: dict) -> None:
        f: faults_mod.Faults = app.state.faults
        if f.slow_s:
            time.sleep(f.slow_s)  # the fault being simulated is a slow engine
        if f.should_error():
            raise BadRequest(f"mock engine fault: injected HTTP {f.error_status}", f.error_status)
        if body.get("stream"):
            raise BadRequest("stream=true is not supported by the mock engine; send a non-streaming request")
        name = body.get("model")
        if name not in (None, settings.served_name):
            raise BadRequest(f"The model `{name}` does not exist.", 404)

    def _sampling(body: dict, prompt_len: int, top_logprobs: int) -> Sampling:
        if prompt_len >= settings.max_model_len:
            raise BadRequest(
                f"This model's maximum context length is {settings.max_model_len} tokens. However, your request "
                f"has {prompt_len} input tokens. Please reduce the length of the input messages."
            )
        room = settings.max_model_len - prompt_len
        requested = body.get("max_completion_tokens") or body.get("max_tokens")
        if requested is not None and int(requested) > room:
            raise BadRequest(
                f"'max_tokens' or 'max_completion_tokens' is too large: {requested}. This model's maximum context "
                f"length is {settings.max_model_len} tokens and your request has {prompt_len} input tokens "
                f"({requested} > {settings.max_model_len} - {prompt_len})."
            )
        max_tokens = min(int(requested) if requested is not None else room, settings.max_new_tokens)
        body = {**settings.sampling_defaults, **{k: v for k, v in body.items() if v is not None}}
        try:
            return Sampling(
                max_tokens=max(max_tokens, 1),
                temperature=float(1.0 if body.get("temperature") is None else body["temperature"]),
                top_p=float(1.0 if body.get("top_p") is None else body["top_p"]),
                top_k=int(-1 if body.get("top_k") is None else body["top_k"]),
                min_p=float(body.get("min_p") or 0.0),
                seed=None if body.get("seed") is None else int(body["seed"]),
                top_logprobs=top_logprobs,
                raw_logprobs="raw_logprobs" in app.state.faults,
            )
        except (TypeError, ValueError) as exc:
            raise BadRequest(f"invalid sampling parameter: {exc}") from None

    def _token_label(token_id: int, f: faults_mod.Faults) -> str:
        if "token_strings" in f or "logprobs_without_ids" in f:
            return lm.token_text(token_id)
        return f"token_id:{token_id}"

    def _ids_fields(f: faults_mod.Faults, wanted: bool) -> tuple[bool, bool]:
        ids = wanted and "no_token_ids" not in f and "logprobs_without_ids" not in f
        prompt = wanted and "no_prompt_token_ids" not in f and "logprobs_without_ids" not in f
        return ids, prompt

    # Length of a command the model writes itself off script (CPU time; the command is noise anyway).
    MAX_COMMAND_TOKENS = 40

    def _envelope(id_prefix: str, kind: str, choices: list, prompt_tokens: int, total_out: int, **top) -> dict:
        """vLLM's response around the choices, in its key order; `top` is what the chat route adds at the top level
        (its prompt token ids), placed where vLLM places it."""
        return {
            "id": f"{id_prefix}-{uuid.uuid4().hex}",
            "object": kind,
            "created": int(time.time()),
            "model": settings.served_name,
            "choices": choices,
            "service_tier": None,
            "system_fingerprint": None,
            "usage": {
                "prompt_tokens": prompt_tokens,
                "total_tokens": prompt_tokens + total_out,
                "completion_tokens": total_out,
                "prompt_tokens_details": None,
            },
            **top,
            "kv_transfer_params": None,
        }

    @app.post("/v1/chat/completions")
    def chat(body: dict):
        _guard(body)
        f = app.state.faults
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("messages must be a non-empty list")
        tools = body.get("tools") or None
        if body.get("tool_choice") == "none":
            tools = None
        template_kwargs = {**settings.template_kwargs, **(body.get("chat_template_kwargs") or {})}
        if "fork" in f:
            messages = faults_mod.rerender_history(messages)
        # The template gets the messages as vLLM hands them over; the script reads them as the agent sent them
        # (its arguments as the JSON string the agent holds).
        rendered = _as_vllm_renders(messages) if settings.chat_rules == "qwen3" else messages
        try:
            prompt_ids = lm.render_chat(rendered, tools, body.get("add_generation_prompt", True), template_kwargs)
        except Exception as exc:  # a template error is the client's malformed conversation
            raise BadRequest(f"could not render the conversation with the chat template: {exc}") from None
        want_lp = bool(body.get("logprobs"))
        k = int(body.get("top_logprobs") or 0) if want_lp else 0
        s = _sampling(body, len(prompt_ids), k)
        n = int(body.get("n") or 1)
        choices = []
        total_out = 0
        with metrics.request(len(prompt_ids)) as held:
            for index in range(n):
                seed = None if s.seed is None else s.seed + index
                action = script.next_action(messages, seed) if script else None
                if action is not None:
                    forced = lm.encode(toolcalls.format_call("bash", {"command": action})) + [lm.tokenizer.eos_token_id]
                    # max_tokens binds the script too: a truncated call comes back as text, as from a real model.
                    # (but not MOCK_MAX_NEW_TOKENS, which only bounds the CPU spent on free samples).
                    limit = (
                        body.get("max_completion_tokens")
                        or body.get("max_tokens")
                        or settings.max_model_len - len(prompt_ids)
                    )
                    forced = forced[: int(limit)]
                    gen = lm.score(prompt_ids, forced, s)
                elif script and script.off_script == "command" and tools and script.matches(messages):
                    # Off script on a scripted task: the model writes its own command, inside a call the
                    # agent accepts (lm.sample_command says why a free sample would fork the rollout).
                    prefix, suffix = toolcalls.format_call("bash", {"command": "\0"}).split('\\u0000"')
                    gen = lm.sample_command(
                        prompt_ids,
                        prefix,
                        suffix,
                        Sampling(**{**s.__dict__, "seed": seed}),
                        max_command_tokens=MAX_COMMAND_TOKENS,
                    )
                    limit = int(body.get("max_completion_tokens") or body.get("max_tokens") or len(gen.token_ids))
                    if (
                        len(gen.token_ids) > limit
                    ):  # cut by max_tokens: text with finish_reason length, as from a real model
                        gen.token_ids, gen.logprobs = gen.token_ids[:limit], gen.logprobs[:limit]
                        gen.top_logprobs, gen.finish_reason = gen.top_logprobs[:limit], "length"
                else:
                    # The fault is for the model's own replies only: a scripted call followed by another
                    # token would fork whatever the stop set (vLLM's hermes parser drops what follows a call).
                    detour = lm.other_end if "turn_end_other" in f else None
                    gen = lm.sample(prompt_ids, Sampling(**{**s.__dict__, "seed": seed}), detour=detour)
                total_out += len(gen.token_ids)
                metrics.generated(held, len(gen.token_ids))
                text_ids = gen.token_ids[:-1] if gen.finish_reason == "stop" else gen.token_ids
                split = toolcalls.parse_hermes if settings.chat_rules == "qwen3" else toolcalls.parse
                parsed = split(lm.decode(text_ids), tools_offered=bool(tools))
                ids_on, _ = _ids_fields(f, bool(body.get("return_token_ids")))
                choice = {
                    "index": index,
                    "message": {
                        "role": "assistant",
                        "content": parsed.content,
                        "refusal": None,
                        "annotations": None,
                        "audio": None,
                        "function_call": None,
                        "tool_calls": parsed.tool_calls,
                        "reasoning": None,
                        "reasoning_content": None,
                    },
                    "logprobs": _chat_logprobs(gen, f) if want_lp else None,
                    "finish_reason": "tool_calls" if parsed.tool_calls else gen.finish_reason,
                    "stop_reason": None,
                    "token_ids": gen.token_ids if ids_on else None,
                }
                choices.append(choice)
        _, prompt_on = _ids_fields(f, bool(body.get("return_token_ids")))
        return _envelope(
            "chatcmpl",
            "chat.completion",
            choices,
            len(prompt_ids),
            total_out,
            prompt_logprobs=None,
            prompt_token_ids=prompt_ids if prompt_on else None,
        )

    def _as_vllm_renders(messages: list) -> list:
        """What vLLM 0.31 hands the template (stack/serving/chain.py: None content as "", arguments as a dict)."""
        from stack.serving.chain import as_vllm_renders

        try:
            return [as_vllm_renders(m) if isinstance(m, dict) else m for m in messages]
        except (ValueError, TypeError, KeyError) as exc:
            raise BadRequest(f"a tool call's arguments are not a JSON object: {exc}") from None

    def _chat_logprobs(gen: Generation, f) -> dict:
        content = []
        for tid, lp, top in zip(gen.token_ids, gen.logprobs, gen.top_logprobs):
            content.append(
                {
                    "token": _token_label(tid, f),
                    "logprob": lp,
                    "bytes": list(lm.token_text(tid).encode()),
                    "top_logprobs": [
                        {"token": _token_label(t, f), "logprob": v, "bytes": list(lm.token_text(t).encode())}
                        for t, v in top
                    ],
                }
            )
        return {"content": content}

    @app.post("/v1/completions")
    def completions(body: dict):
        _guard(body)
        f = app.state.faults
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]
        if isinstance(prompt, str):
            prompt_ids = lm.encode(prompt)
        elif isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
            vocab = len(lm.tokenizer)
            bad = next((t for t in prompt if not 0 <= t < vocab), None)
            if bad is not None:
                raise BadRequest(f"token id {bad} is out of vocabulary (size {vocab})")
            prompt_ids = list(prompt)
        else:
            raise BadRequest("prompt must be one string or one list of token ids (batched prompts are not supported)")
        lp_k = body.get("logprobs")
        want_lp = lp_k is not None and lp_k is not False
        s = _sampling(body, len(prompt_ids), int(lp_k or 0) if want_lp else 0)
        n = int(body.get("n") or 1)
        ids_on, prompt_on = _ids_fields(f, bool(body.get("return_token_ids")))
        choices, total_out = [], 0
        with metrics.request(len(prompt_ids)) as held:
            for index in range(n):
                seed = None if s.seed is None else s.seed + index
                gen = lm.sample(prompt_ids, Sampling(**{**s.__dict__, "seed": seed}))
                total_out += len(gen.token_ids)
                metrics.generated(held, len(gen.token_ids))
                text_ids = gen.token_ids[:-1] if gen.finish_reason == "stop" else gen.token_ids
                logprobs = None
                if want_lp:
                    offsets, pos = [], 0
                    for tid in gen.token_ids:
                        offsets.append(pos)
                        pos += len(lm.token_text(tid))
                    logprobs = {
                        "text_offset": offsets,
                        "token_logprobs": gen.logprobs,
                        "tokens": [_token_label(t, f) for t in gen.token_ids],
                        # vLLM always includes the sampled token next to the top-k.
                        "top_logprobs": [
                            {_token_label(tid, f): lp, **{_token_label(t, f): v for t, v in top}}
                            for tid, lp, top in zip(gen.token_ids, gen.logprobs, gen.top_logprobs)
                        ],
                    }
                choices.append(
                    {
                        "index": index,
                        "text": lm.decode(text_ids),
                        "logprobs": logprobs,
                        "finish_reason": gen.finish_reason,
                        "stop_reason": None,
                        "token_ids": gen.token_ids if ids_on else None,
                        "prompt_logprobs": None,
                        "prompt_token_ids": prompt_ids if prompt_on else None,
                    }
                )
        return _envelope("cmpl", "text_completion", choices, len(prompt_ids), total_out)

    @app.post("/tokenize")
    def tokenize(body: dict):
        if "messages" in body:
            messages = _as_vllm_renders(body["messages"]) if settings.chat_rules == "qwen3" else body["messages"]
            ids = lm.render_chat(
                messages,
                body.get("tools"),
                body.get("add_generation_prompt", True),
                {**settings.template_kwargs, **(body.get("chat_template_kwargs") or {})},
            )
        else:
            ids = lm.encode(str(body.get("prompt", "")))
        return {"count": len(ids), "max_model_len": settings.max_model_len, "tokens": ids, "token_strs": None}

    @app.post("/detokenize")
    def detokenize(body: dict):
        return {"prompt": lm.decode(list(body.get("tokens") or []))}

    # ---- dev routes (VLLM_SERVER_DEV_MODE=1), as TRL's VLLMClient calls them ----------------------
    @app.get("/get_world_size")
    def world_size():
        return {"world_size": 1}

    @app.post("/pause")
    def pause(mode: str = "keep"):
        if "hold_pause" in app.state.faults:
            # A push held open (faults.py): said once, so a test knows the push is in progress.
            print("mock_engine: fault hold_pause: holding POST /pause open", flush=True)
            held = time.monotonic() + faults_mod.HOLD_PAUSE_S
            while "hold_pause" in app.state.faults and time.monotonic() < held:
                time.sleep(0.1)
        lm.running.clear()
        return {"status": "paused", "mode": mode}

    @app.post("/resume")
    def resume():
        lm.running.set()
        return {"status": "resumed"}

    @app.get("/is_paused")
    def is_paused():
        return {"is_paused": not lm.running.is_set()}

    @app.post("/init_weight_transfer_engine")
    def init_weight_transfer(body: dict):
        # The NCCL rendezvous TRL's client would start has no counterpart here: weights arrive over HTTP
        # from mock_engine.weight_client. Accepting the call keeps TRL's own sequence runnable.
        app.state.init_info = body.get("init_info")
        return {"status": "ok", "transport": "http-safetensors"}

    @app.post("/start_weight_update")
    def start_weight_update(body: dict | None = None):
        lm.start_update()
        return {"status": "ok"}

    @app.post("/update_weights")
    async def update_weights(request: Request):
        """JSON `{"update_info": {names, dtype_names, shapes}}` declares a manifest (TRL's call); a
        safetensors body (application/octet-stream) carries tensors (mock_engine.weight_client)."""
        raw = await request.body()
        try:
            if request.headers.get("content-type", "").startswith("application/json"):
                import json

                lm.declare((json.loads(raw or b"{}") or {}).get("update_info") or {})
                return {"status": "ok"}
            from safetensors.torch import load

            try:
                tensors = load(raw)
            except Exception as exc:
                raise BadRequest(f"update_weights body is not a safetensors blob: {exc}") from None
            return {"status": "ok", "received": lm.receive(tensors)}
        except WeightUpdateError as exc:
            raise BadRequest(str(exc)) from None

    @app.post("/finish_weight_update")
    def finish_weight_update():
        try:
            return {"status": "ok", **lm.finish_update(serve="weights_not_served" not in app.state.faults)}
        except WeightUpdateError as exc:
            raise BadRequest(str(exc)) from None

    # ---- mock-only routes ---------------------------------------------------------------------
    @app.get("/mock/weight_manifest")
    def weight_manifest():
        return {**lm.manifest(), "weight_version": lm.weight_version}

    @app.get("/mock/faults")
    def get_faults():
        return app.state.faults.to_json()

    @app.post("/mock/faults")
    def set_faults(body: dict):
        try:
            app.state.faults = faults_mod.parse(
                body.get("active") or [], body.get("slow_s"), body.get("error_status"), body.get("error_rate")
            )
        except faults_mod.FaultError as exc:
            raise BadRequest(str(exc)) from None
        return app.state.faults.to_json()

    return app
