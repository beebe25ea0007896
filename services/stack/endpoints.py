"""ENGINE_URL is the engine's root (`http://host:port`) everywhere; the OpenAI API base is derived here.

One meaning for every reader: a variable that is the root for one service and `.../v1` for another
breaks one of them whenever a value is copied between them.
"""

from __future__ import annotations

from .env import Env, Field
from .facts import DEFAULT_PORTS

DEFAULT_ENGINE_URL = f"http://127.0.0.1:{DEFAULT_PORTS['ENGINE_PORT']}"
OPENAI_PATH = "/v1"
ENGINE_URL = Field("ENGINE_URL", "url", DEFAULT_ENGINE_URL, "the engine's root; /v1 is added where the API is called")


def openai_base(engine_url: str) -> str:
    """`http://host:port` -> `http://host:port/v1`: where chat completions and /models live."""
    return engine_url.rstrip("/") + OPENAI_PATH


def read_engine_url(read: Env) -> str:
    """ENGINE_URL from the environment: the root. A `/v1` suffix is refused, not stripped: accepting both
    spellings silently is how two meanings drift apart."""
    url = read.get(ENGINE_URL)
    if url.rstrip("/").endswith(OPENAI_PATH):
        return read.refuse(
            f"ENGINE_URL={url!r} ends in {OPENAI_PATH}: set the engine's root, e.g. {DEFAULT_ENGINE_URL} "
            f"({OPENAI_PATH} is added where the OpenAI API is called)",
            DEFAULT_ENGINE_URL,
        )
    return url
