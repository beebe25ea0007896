"""Serve the mock engine: `python -m mock_engine` (127.0.0.1:$ENGINE_PORT).

Environment:
  MOCK_MODEL_DIR         HF folder built by `python -m mock_engine.build_model` (default /app/models/tiny-agent);
                         its generation_config.json's top_k/top_p/min_p become defaults for requests that
                         leave them unset, as vLLM applies a model's generation config
  MODEL                  served model name (default: MOCK_MODEL_DIR), what clients put in `model`
  ENGINE_HOST/ENGINE_PORT  bind address (default 127.0.0.1:8001); only loopback is accepted
  MOCK_MAX_MODEL_LEN     max_model_len (default: ENGINE_MAX_MODEL_LEN, else 32768)
  MOCK_MAX_NEW_TOKENS    cap on generated tokens per call, a CPU budget (default 256)
  MOCK_MAX_NUM_SEQS      generations admitted at once, as vLLM's --max-num-seqs (default 8); more wait
  MOCK_SCRIPT_FILE, MOCK_SCRIPT_PROB   scripted mode (mock_engine.script)
  MOCK_OFF_SCRIPT                     free | command: what an off-script turn of a scripted task is
  MOCK_FAULTS, MOCK_SLOW_S, MOCK_ERROR_STATUS, MOCK_ERROR_RATE   fault switches (mock_engine.faults)
"""

from __future__ import annotations

import os
import sys

from stack.env import Env, EnvError
from stack.facts import DEFAULT_PORTS, LOOPBACK_HOSTS


def main() -> None:
    from mock_engine import faults, script

    read = Env(collect=True)
    host = read.choice(
        "ENGINE_HOST",
        "127.0.0.1",
        LOOPBACK_HOSTS,
        fix="the engine must bind 127.0.0.1 (only the capture proxy is public)",
    )
    port = read.port("ENGINE_PORT", DEFAULT_PORTS["ENGINE_PORT"])
    max_model_len = read.integer(
        "MOCK_MAX_MODEL_LEN", read.integer("ENGINE_MAX_MODEL_LEN", 32768, minimum=1), minimum=1
    )
    max_new_tokens = read.integer("MOCK_MAX_NEW_TOKENS", 256, minimum=1)
    threads = read.integer("MOCK_TORCH_THREADS", 1, minimum=1)
    max_num_seqs = read.integer("MOCK_MAX_NUM_SEQS", 8, minimum=1)
    try:
        read.check()
    except EnvError as exc:
        sys.exit("\n".join(f"mock_engine: {line}" for line in str(exc).splitlines()))
    model_dir = read.text("MOCK_MODEL_DIR", "/app/models/tiny-agent")
    if not os.path.isfile(os.path.join(model_dir, "config.json")):
        sys.exit(
            f"mock_engine: MOCK_MODEL_DIR={model_dir} holds no model; build one with "
            f"`python -m mock_engine.build_model {model_dir}`"
        )
    try:
        active = faults.from_env(os.environ)
        scripted = None
        if os.environ.get("MOCK_SCRIPT_FILE"):
            scripted = script.Script(
                script.load(os.environ["MOCK_SCRIPT_FILE"]),
                script.parse_prob(os.environ.get("MOCK_SCRIPT_PROB")),
                os.environ.get("MOCK_OFF_SCRIPT") or "free",
            )
    except (faults.FaultError, script.ScriptError) as exc:
        sys.exit(f"mock_engine: {exc}")

    import torch
    import uvicorn

    from mock_engine.app import Settings, create_app, generation_defaults
    from mock_engine.lm import TinyLM

    torch.set_num_threads(threads)
    settings = Settings(
        model_dir=model_dir,
        served_name=read.text("MODEL", model_dir),
        max_model_len=max_model_len,
        max_new_tokens=max_new_tokens,
        max_num_seqs=max_num_seqs,
        sampling_defaults=generation_defaults(model_dir),
    )
    lm = TinyLM(model_dir, settings.max_model_len, settings.max_new_tokens)
    app = create_app(settings, lm, scripted, active)
    print(
        f"mock_engine: serving {settings.served_name} on http://{host}:{port} "
        f"(script: {os.environ.get('MOCK_SCRIPT_FILE') or 'off'}, faults: {sorted(active.active) or 'none'}, "
        f"generation-config sampling defaults: {settings.sampling_defaults or 'none'})",
        flush=True,
    )
    uvicorn.run(app, host=host, port=port, log_level=os.environ.get("MOCK_LOG_LEVEL", "warning"))


if __name__ == "__main__":
    main()
