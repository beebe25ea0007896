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
  TURN_END_TOKENS        the stop set, as the production engine's (stack/serving/turn_end.py): auto (default) stops
                         on the chat template's turn end alone, model on the generation config's eos ids
  MOCK_CHAT_RULES        chatml (default): the mock's own template, a call kept only when it round-trips;
                         qwen3: Qwen3's thinking rules and vLLM's hermes split (mock_engine/tokenizer.py,
                         toolcalls.py), so the CPU form forks where the GPU would (compose.cpu.yaml sets it)
  CHAT_TEMPLATE_FIX, TURN_CHAIN_CHECK, CHAT_TEMPLATE_KWARGS, TOOL_CALL_PARSER, REASONING_PARSER
                         as the production engine's (stack/serving/served_template.py): the template served is
                         derived and checked to chain at start, the same way
"""

from __future__ import annotations

import json
import os
import sys

from stack import fields
from stack.env import Env, EnvError, Field, Table

# The CPU form's engine. MOCK_FAULTS and friends are the fault suite's switches (mock_engine/faults.py).
FIELDS = Table(
    fields.ENGINE_HOST,
    fields.ENGINE_PORT,
    fields.ENGINE_MAX_MODEL_LEN,
    fields.MODEL,
    fields.TURN_END_TOKENS,
    fields.CHAT_TEMPLATE_FIX,
    fields.TURN_CHAIN_CHECK,
    Field(
        "MOCK_CHAT_RULES",
        "choice",
        "chatml",
        "the mock's chat rules: chatml (its own), qwen3 (Qwen3's thinking rules and vLLM's hermes split)",
        choices=("chatml", "qwen3"),
    ),
    Field("MOCK_MAX_MODEL_LEN", "integer", None, "the mock's context; empty: ENGINE_MAX_MODEL_LEN", minimum=1),
    Field("MOCK_MAX_NEW_TOKENS", "integer", 256, "the mock's longest completion", minimum=1),
    Field("MOCK_TORCH_THREADS", "integer", 1, "torch threads for the tiny model", minimum=1),
    Field("MOCK_MAX_NUM_SEQS", "integer", 8, "sequences generated at once", minimum=1),
    Field("MOCK_MODEL_DIR", "text", "/app/models/tiny-agent", "the tiny model served"),
    Field("MOCK_SCRIPT_FILE", "text", "", "scripted answers (mock_engine/script.py); empty: off"),
    Field("MOCK_SCRIPT_PROB", "text", "0.5", "probability of a scripted answer (mock_engine/script.py)"),
    Field("MOCK_OFF_SCRIPT", "text", "free", "what the model does off the script"),
    Field("MOCK_LOG_LEVEL", "text", "warning", "uvicorn's log level"),
)


def main() -> None:
    from mock_engine import faults, script
    from stack.serving import turn_end

    read = Env(collect=True)

    def get(name: str):
        return read.get(FIELDS[name])

    host, port = get("ENGINE_HOST"), get("ENGINE_PORT")
    max_model_len = read.get(FIELDS["MOCK_MAX_MODEL_LEN"], get("ENGINE_MAX_MODEL_LEN"))
    max_new_tokens = get("MOCK_MAX_NEW_TOKENS")
    threads = get("MOCK_TORCH_THREADS")
    max_num_seqs = get("MOCK_MAX_NUM_SEQS")
    model_dir = get("MOCK_MODEL_DIR")
    script_file = get("MOCK_SCRIPT_FILE")
    stop_setting = get("TURN_END_TOKENS")
    chat_rules = get("MOCK_CHAT_RULES")
    for name in ("CHAT_TEMPLATE_FIX", "TURN_CHAIN_CHECK"):
        get(name)  # checked now, with the others, in one report
    try:
        turn_end.parse_setting(stop_setting)
        read.check()
    except EnvError as exc:
        sys.exit("\n".join(f"mock_engine: {line}" for line in str(exc).splitlines()))
    if not os.path.isfile(os.path.join(model_dir, "config.json")):
        sys.exit(
            f"mock_engine: MOCK_MODEL_DIR={model_dir} holds no model; build one with "
            f"`python -m mock_engine.build_model {model_dir}`"
        )
    try:
        with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as fh:
            if not isinstance(json.load(fh), dict):
                raise ValueError("not a JSON object")
    except (OSError, ValueError) as exc:  # transformers would end this in a traceback at load
        sys.exit(
            f"mock_engine: MOCK_MODEL_DIR={model_dir} has a broken config.json ({type(exc).__name__}: "
            f"{' '.join(str(exc).split())[:120]}); rebuild it with `python -m mock_engine.build_model {model_dir}`"
        )
    try:
        active = faults.from_env(os.environ)
        scripted = None
        if script_file:
            scripted = script.Script(
                script.load(script_file),
                script.parse_prob(get("MOCK_SCRIPT_PROB") or None),
                get("MOCK_OFF_SCRIPT"),
            )
    except (faults.FaultError, script.ScriptError) as exc:
        sys.exit(f"mock_engine: {exc}")

    import torch
    import uvicorn

    from mock_engine.app import Settings, create_app, generation_defaults, stop_plan
    from mock_engine.lm import TinyLM
    from mock_engine.tokenizer import RULES
    from stack.serving import chain, served_template

    torch.set_num_threads(threads)
    settings = Settings(
        model_dir=model_dir,
        # The CPU form names the tiny model's folder (compose.cpu.yaml sets MODEL to it).
        served_name=read.text("MODEL", model_dir),
        max_model_len=max_model_len,
        max_new_tokens=max_new_tokens,
        max_num_seqs=max_num_seqs,
        sampling_defaults=generation_defaults(model_dir),
        chat_rules=chat_rules,
        template_kwargs=served_template.template_kwargs(read.text("CHAT_TEMPLATE_KWARGS")),
    )
    lm = TinyLM(model_dir, settings.max_model_len, settings.max_new_tokens)
    lm.tokenizer.chat_template = RULES[chat_rules]
    try:
        # As the production launcher: derive the template to serve (onto lm.tokenizer), prove turns chain.
        served = served_template.prepare(os.environ, lm.tokenizer, False)
        plan = stop_plan(lm.tokenizer, model_dir, stop_setting)
    except EnvError as exc:
        sys.exit(f"mock_engine: refusing to start: {exc}")
    lm.use_stops(plan)
    turn_end.write_record(plan.line())  # the healthcheck's probe repeats it, as for the real engine
    chain.write_record(f"{chat_rules} rules; {served.line()}")
    print(f"mock_engine: {plan.line()}", flush=True)
    print(f"mock_engine: {chat_rules} rules; {served.line()}", flush=True)
    app = create_app(settings, lm, scripted, active)
    print(
        f"mock_engine: serving {settings.served_name} on http://{host}:{port} "
        f"(script: {script_file or 'off'}, faults: {sorted(active.active) or 'none'}, "
        f"generation-config sampling defaults: {settings.sampling_defaults or 'none'})",
        flush=True,
    )
    uvicorn.run(app, host=host, port=port, log_level=get("MOCK_LOG_LEVEL"))


if __name__ == "__main__":
    main()
