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


def _int(name: str, default: str) -> int:
    raw = os.environ.get(name) or default
    if not raw.isdigit() or int(raw) < 1:
        sys.exit(f"mock_engine: {name}={raw!r} must be a positive integer")
    return int(raw)


def main() -> None:
    from mock_engine import faults, script

    host = os.environ.get("ENGINE_HOST") or "127.0.0.1"
    if host not in {"127.0.0.1", "localhost", "::1"}:
        sys.exit(
            f"mock_engine: ENGINE_HOST={host!r}: the engine must bind 127.0.0.1 (only the capture proxy is public)"
        )
    port = _int("ENGINE_PORT", "8001")
    model_dir = os.environ.get("MOCK_MODEL_DIR") or "/app/models/tiny-agent"
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

    torch.set_num_threads(int(os.environ.get("MOCK_TORCH_THREADS") or 1))
    settings = Settings(
        model_dir=model_dir,
        served_name=os.environ.get("MODEL") or model_dir,
        max_model_len=_int("MOCK_MAX_MODEL_LEN", os.environ.get("ENGINE_MAX_MODEL_LEN") or "32768"),
        max_new_tokens=_int("MOCK_MAX_NEW_TOKENS", "256"),
        max_num_seqs=_int("MOCK_MAX_NUM_SEQS", "8"),
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
