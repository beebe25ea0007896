"""mini-swe-agent's model layer without litellm: the OpenAI chat call to the capture proxy, over the standard library.

Copied into the agent's own Python in every sandbox (env_server/agent_install.py) and named by
`--model-class asyncgrpo_chat_model.CaptureChatModel`. It imports mini-swe-agent and the standard library only.

Why: mini-swe-agent 2.4.6's default model class (`models/litellm_model.py`) imports litellm, measured at
4.5-8 CPU-s and ~200 MB in every fresh sandbox, most of a rollout's CPU (docs/LEARNING.md); the call it makes
is one POST. What stays as the litellm class did it (read in mini-swe-agent 2.4.6 and litellm 1.110.2, the
version `pip install mini-swe-agent==2.4.6` resolves; every rule below was measured against it, and
tests/integration/env_server_guards/test_chat_model_parity.py compares the two through the real capture proxy):
  - the request: POST <api_base>/chat/completions, `Authorization: Bearer <key>`, model_kwargs' extra_headers;
    body `model` (the provider prefix `openai/` removed), `messages` (mini's `extra` removed, then every key
    whose value is None dropped from each message, as litellm's openai path does), `tools` [BASH_TOOL], the
    other model_kwargs, `extra_body` merged in. api_base from model_kwargs, else OPENAI_BASE_URL, else
    OPENAI_API_BASE; the key from model_kwargs, else OPENAI_API_KEY (litellm's order);
  - retries: each call retries 408/409/429/5xx and connection errors twice, 0.5 s then 1 s (x0.75-1 jitter,
    Retry-After up to 60 s honoured: the OpenAI client's max_retries=2 under litellm); around that
    mini-swe-agent's own `retry()` (10 attempts, 4-60 s), which gives up at once on 401/404 and on a
    context-window error, as on litellm's AuthenticationError/NotFound/ContextWindowExceeded;
  - the timeout: model_kwargs' `timeout` (Harbor passes 3600), litellm's 600 s default otherwise;
  - the message handed back (`message.model_dump()` in litellm, which mini-swe-agent sends back as history, so
    it decides whether turns chain): `assistant_message` below;
  - cost: litellm has no price for a self-served model, so its cost was 0.0 under MSWEA_COST_TRACKING=
    ignore_errors (what Harbor sets) and a RuntimeError otherwise; the same here. Step limit, format errors
    and the trajectory are mini-swe-agent's own code, unchanged.
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import time
import urllib.error
import urllib.request
import uuid
from types import SimpleNamespace
from typing import Any, Literal

from minisweagent.exceptions import FormatError
from minisweagent.models import GLOBAL_MODEL_STATS
from minisweagent.models.utils.actions_toolcall import (
    BASH_TOOL,
    format_toolcall_observation_messages,
    parse_toolcall_actions,
)
from minisweagent.models.utils.anthropic_utils import _reorder_anthropic_thinking_blocks
from minisweagent.models.utils.cache_control import set_cache_control
from minisweagent.models.utils.openai_multimodal import expand_multimodal_content
from minisweagent.models.utils.retry import retry
from pydantic import BaseModel

logger = logging.getLogger("asyncgrpo_chat_model")

LITELLM_DEFAULT_TIMEOUT_S = 600.0
# The OpenAI client under litellm: max_retries=2, 0.5 s doubling to at most 8 s, jitter down to x0.75.
CLIENT_RETRIES = 2
RETRY_STATUSES = frozenset({408, 409, 429}) | frozenset(range(500, 600))
# litellm 1.110.2 maps 401 and 404 to its abort exceptions; a 403 from an openai-compatible server comes out as
# APIError, which mini-swe-agent retries (measured: test_retries_and_aborts_match_litellms).
ABORT_STATUSES = frozenset({401, 404})
# litellm 1.110.2 `ExceptionCheckers.is_error_str_context_window_exceeded` (vLLM's line is the second).
CONTEXT_WINDOW_MARKS = (
    "exceed context limit",
    "this model's maximum context length is",
    "requested token count exceeds the model's maximum context length",
    "string too long. expected a string with maximum length",
    "model's maximum context limit",
    "is longer than the model's context length",
    "input tokens exceed the configured limit",
    "`inputs` tokens + `max_new_tokens` must be",
    "exceeds the available context size",
    "exceeds the maximum number of tokens allowed",
    '"code": "context_length_exceeded"',
    "prompt is too long",
)
# model_kwargs that configure the call rather than travel in its body (litellm consumes them the same way).
CALL_KWARGS = ("api_base", "base_url", "api_key", "timeout", "extra_headers", "extra_body", "custom_llm_provider")
# litellm 1.110.2's `Message` fields: any other key of the engine's message goes to provider_specific_fields.
MESSAGE_FIELDS = frozenset(
    {
        "content",
        "role",
        "refusal",
        "tool_calls",
        "function_call",
        "audio",
        "images",
        "reasoning_content",
        "thinking_blocks",
        "reasoning_items",
        "provider_specific_fields",
        "annotations",
    }
)
THINK = re.compile(r"<(?:think|thinking|budget:thinking)>(.*?)</(?:think|thinking|budget:thinking)>(.*)", re.DOTALL)


class CaptureChatModelConfig(BaseModel):
    """LitellmModelConfig's fields (mini-swe-agent 2.4.6), so a config written for the litellm class loads here."""

    model_name: str
    model_kwargs: dict[str, Any] = {}
    litellm_model_registry: str | None = None
    set_cache_control: Literal["default_end"] | None = None
    cost_tracking: Literal["default", "ignore_errors"] = os.getenv("MSWEA_COST_TRACKING", "default")
    format_error_template: str = "{{ error }}"
    observation_template: str = (
        "{% if output.exception_info %}<exception>{{output.exception_info}}</exception>\n{% endif %}"
        "<returncode>{{output.returncode}}</returncode>\n<output>\n{{output.output}}</output>"
    )
    multimodal_regex: str = ""


class ModelCallError(Exception):
    """A call the engine refused; mini-swe-agent's retry() tries it again."""


class ModelCallAborted(ModelCallError):
    """A refusal that no retry can change (wrong key, no such route or model, the context is full)."""


def assistant_message(raw: dict[str, Any]) -> dict[str, Any]:
    """litellm 1.110.2's `Message(...).model_dump()` for the engine's message: its keys, Nones and order.

    Always content, role, tool_calls (None when empty), function_call, provider_specific_fields (the keys that
    are not Message fields, None when there are none); refusal only when the engine sent the key;
    reasoning_content only when not None (from `reasoning_content`, else `reasoning`, else a leading <think>
    block cut out of content); audio, images, annotations, thinking_blocks, reasoning_items only when not None."""
    content = raw.get("content")
    if "reasoning_content" in raw:
        reasoning = raw["reasoning_content"]
    elif "reasoning" in raw:
        reasoning = raw["reasoning"]
    elif isinstance(content, str) and content and (m := THINK.match(content)):
        reasoning, content = m.group(1), m.group(2)
    else:
        reasoning = None
    extra = dict(raw.get("provider_specific_fields") or {})
    extra.update({k: v for k, v in raw.items() if k not in MESSAGE_FIELDS})
    if "thinking_blocks" in raw:
        extra["thinking_blocks"] = raw["thinking_blocks"]
    function_call = raw.get("function_call")
    out: dict[str, Any] = {
        "content": content,
        "role": raw.get("role") or "assistant",
        "tool_calls": [_tool_call(tc) for tc in raw.get("tool_calls") or []] or None,
        "function_call": _function(function_call) if function_call is not None else None,
    }
    for key in ("audio", "images"):
        if raw.get(key) is not None:
            out[key] = raw[key]
    if reasoning is not None:
        out["reasoning_content"] = reasoning
    for key in ("thinking_blocks", "reasoning_items"):
        if raw.get(key) is not None:
            out[key] = raw[key]
    out["provider_specific_fields"] = extra or None
    if raw.get("annotations") is not None:
        out["annotations"] = raw["annotations"]
    if "refusal" in raw:
        out["refusal"] = raw["refusal"]
    return out


def _function(raw: dict[str, Any]) -> dict[str, Any]:
    arguments = raw.get("arguments")
    if arguments is None:
        arguments = json.dumps(raw["parameters"]) if isinstance(raw.get("parameters"), dict) else ""
    elif isinstance(arguments, dict):
        arguments = json.dumps(arguments)
    return {"arguments": arguments, "name": raw.get("name")}


def _tool_call(raw: dict[str, Any]) -> dict[str, Any]:
    # litellm's ChatCompletionMessageToolCall: extra keys first (e.g. `index`), then function, id, type.
    out = {k: v for k, v in raw.items() if k not in ("function", "id", "type")}
    out["function"] = _function(raw.get("function") or {})
    out["id"] = raw["id"] if raw.get("id") is not None else str(uuid.uuid4())
    out["type"] = raw.get("type") or "function"
    return out


def wire_messages(messages: list[dict]) -> list[dict]:
    """What litellm's openai path sends for each message: top-level keys whose value is None are left out."""
    return [{k: v for k, v in m.items() if v is not None} for m in messages]


def _retry_after_s(headers: Any) -> float | None:
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name) if headers is not None else None
        try:
            seconds = float(value) * scale
        except (TypeError, ValueError):
            continue
        if 0 < seconds <= 60:
            return seconds
    return None


class CaptureChatModel:
    abort_exceptions: list[type[BaseException]] = [ModelCallAborted, KeyboardInterrupt]

    def __init__(self, **kwargs: Any) -> None:
        self.config = CaptureChatModelConfig(**kwargs)

    # --- the call -------------------------------------------------------------------------------------------
    def _request(self, messages: list[dict], **kwargs: Any) -> tuple[urllib.request.Request, float]:
        options = self.config.model_kwargs | kwargs
        base = options.get("api_base") or options.get("base_url")
        base = base or os.getenv("OPENAI_BASE_URL") or os.getenv("OPENAI_API_BASE") or "https://api.openai.com/v1"
        key = options.get("api_key") or os.getenv("OPENAI_API_KEY") or ""
        name = self.config.model_name
        body = {"model": name.split("/", 1)[1] if name.startswith("openai/") else name, "messages": messages}
        body["tools"] = [BASH_TOOL]
        body.update({k: v for k, v in options.items() if k not in CALL_KWARGS})
        body.update(options.get("extra_body") or {})
        headers = {"Content-Type": "application/json", "Accept": "application/json", "Authorization": f"Bearer {key}"}
        headers.update({k: str(v) for k, v in (options.get("extra_headers") or {}).items()})
        url = base.rstrip("/") + "/chat/completions"
        data = json.dumps(body).encode()
        timeout = float(options.get("timeout") or LITELLM_DEFAULT_TIMEOUT_S)
        return urllib.request.Request(url, data=data, headers=headers, method="POST"), timeout

    def _query(self, messages: list[dict], **kwargs: Any) -> dict:
        request, timeout = self._request(messages, **kwargs)
        for attempt in range(CLIENT_RETRIES + 1):
            wait = min(0.5 * 2**attempt, 8.0) * (1 - 0.25 * random.random())
            try:
                with urllib.request.urlopen(request, timeout=timeout) as response:
                    return json.loads(response.read())
            except urllib.error.HTTPError as exc:
                text = exc.read().decode("utf-8", "replace")
                error = f"HTTP {exc.code} from {request.full_url}: {text[:500]}"
                if exc.code in ABORT_STATUSES or any(mark in text.lower() for mark in CONTEXT_WINDOW_MARKS):
                    raise ModelCallAborted(error) from None
                if exc.code not in RETRY_STATUSES or attempt == CLIENT_RETRIES:
                    raise ModelCallError(error) from None
                wait = _retry_after_s(exc.headers) or wait
            except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
                if attempt == CLIENT_RETRIES:
                    raise ModelCallError(f"{request.full_url}: {exc}") from None
            time.sleep(wait)
        raise AssertionError("unreachable")

    def _prepare_messages_for_api(self, messages: list[dict]) -> list[dict]:
        prepared = [{k: v for k, v in msg.items() if k != "extra"} for msg in messages]
        prepared = _reorder_anthropic_thinking_blocks(prepared)
        return wire_messages(set_cache_control(prepared, mode=self.config.set_cache_control))

    # --- mini-swe-agent's Model protocol, as LitellmModel implements it ---------------------------------------
    def query(self, messages: list[dict[str, str]], **kwargs: Any) -> dict:
        for attempt in retry(logger=logger, abort_exceptions=self.abort_exceptions):
            with attempt:
                response = self._query(self._prepare_messages_for_api(messages), **kwargs)
        cost_output = self._calculate_cost(response)
        GLOBAL_MODEL_STATS.add(cost_output["cost"])
        # Once: a tool call without an id gets a fresh one, and the action must name the id sent back.
        message = assistant_message(response["choices"][0]["message"])
        try:
            actions = self._parse_actions(response, message)
        except FormatError as e:
            e.messages[0]["extra"].update(cost_output)
            e.messages[0]["extra"]["response"] = response
            raise
        message["extra"] = {"actions": actions, "response": response, **cost_output, "timestamp": time.time()}
        return message

    def _calculate_cost(self, response: dict) -> dict[str, float]:
        if self.config.cost_tracking != "ignore_errors":
            msg = (
                f"Error calculating cost for model {self.config.model_name}: a self-served model has no price. "
                "Set cost_tracking: 'ignore_errors' in the model config or export MSWEA_COST_TRACKING=ignore_errors."
            )
            logger.critical(msg)
            raise RuntimeError(msg)
        return {"cost": 0.0}

    def _parse_actions(self, response: dict, message: dict) -> list[dict]:
        choice = response["choices"][0]
        finish_reason = choice.get("finish_reason") or "stop"
        if finish_reason == "stop" and message["tool_calls"]:
            finish_reason = "tool_calls"
        calls = [
            SimpleNamespace(id=tc["id"], function=SimpleNamespace(**tc["function"]))
            for tc in message["tool_calls"] or []
        ]
        return parse_toolcall_actions(
            calls,
            format_error_template=self.config.format_error_template,
            template_kwargs={"finish_reason": finish_reason},
        )

    def format_message(self, **kwargs: Any) -> dict:
        return expand_multimodal_content(kwargs, pattern=self.config.multimodal_regex)

    def format_observation_messages(
        self, message: dict, outputs: list[dict], template_vars: dict | None = None
    ) -> list[dict]:
        return format_toolcall_observation_messages(
            actions=message.get("extra", {}).get("actions", []),
            outputs=outputs,
            observation_template=self.config.observation_template,
            template_vars=template_vars,
            multimodal_regex=self.config.multimodal_regex,
        )

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        return self.config.model_dump()

    def serialize(self) -> dict:
        return {
            "info": {
                "config": {
                    "model": self.config.model_dump(mode="json"),
                    "model_type": f"{self.__class__.__module__}.{self.__class__.__name__}",
                },
            }
        }
