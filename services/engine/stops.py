"""The launcher's half of TURN_END_TOKENS (stack/serving/turn_end.py says why): read the model's tokenizer and
generation config the way vLLM 0.31.0 will, decide the stop set, and when it differs from the model's,
write the generation config vLLM is to read instead.

Runs in the engine image (transformers comes with vLLM), before `vllm serve`; the files come from
HF_HOME, where vLLM looks for them next. The flags in ENGINE_EXTRA_ARGS that change what vLLM loads are
honoured here too (--tokenizer, --revision, --tokenizer-revision, --hf-config-path, --trust-remote-code,
--chat-template), so the template read here is the one vLLM serves.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from engine import command
from stack.env import Env, EnvError
from stack.serving import turn_end

# Where the launcher writes the generation config it hands vLLM: the container's own, fresh per start.
GENERATION_CONFIG_DIR = Path(turn_end.RECORD.parent) / "asyncgrpo-engine-generation-config"


def _template(value: str) -> str:
    """vLLM's --chat-template: a file's path or the template itself."""
    path = Path(value)
    try:
        return path.read_text() if path.is_file() else value
    except OSError:
        return value


def _template_kwargs(read: Env) -> dict:
    raw = read.get(command.FIELDS["CHAT_TEMPLATE_KWARGS"])
    try:
        parsed = json.loads(raw) if raw else {}
    except ValueError:
        return {}  # build_command has already refused it with its own line
    return parsed if isinstance(parsed, dict) else {}


@dataclass
class Loaded:
    """The tokenizer as vLLM will load it (None when it did not load, with why), and where from."""

    tokenizer: object | None
    source: str
    why: str = ""
    operator_template: bool = False  # ENGINE_EXTRA_ARGS' --chat-template replaced the model's


def load_tokenizer(env: Mapping[str, str]) -> Loaded:
    """The model's tokenizer with the flags in ENGINE_EXTRA_ARGS that change what vLLM loads."""
    from transformers import AutoTokenizer

    read = Env(env)
    extra = command.extra_args(env)
    model = read.get(command.FIELDS["MODEL"])
    revision = command.extra_value(extra, "--revision") or None
    trust = command.extra_value(extra, "--trust-remote-code") is not None
    source = command.extra_value(extra, "--tokenizer") or model
    try:
        tokenizer = AutoTokenizer.from_pretrained(
            source,
            revision=command.extra_value(extra, "--tokenizer-revision") or revision,
            trust_remote_code=trust,
        )
    except Exception as exc:  # any loader failure: the hub, a missing file, remote code
        return Loaded(None, source, f"the tokenizer of {source} did not load ({type(exc).__name__}: {exc})")
    template = command.extra_value(extra, "--chat-template")
    if template:
        tokenizer.chat_template = _template(template)
    return Loaded(tokenizer, source, operator_template=bool(template))


def prepare(
    env: Mapping[str, str], out_dir: Path = GENERATION_CONFIG_DIR, loaded: Loaded | None = None
) -> tuple[turn_end.Plan, str | None]:
    """(the plan, the folder to pass as --generation-config, or None to let vLLM read the model's own).

    A tokenizer that will not load leaves the stop set as the model's with a line that says so (vLLM then
    fails to load it too, in its own words); a TURN_END_TOKENS list it cannot check is refused. `loaded`:
    the tokenizer stack/serving/served_template.py already set the served template on (None: load it here)."""
    from transformers import AutoConfig, GenerationConfig

    read = Env(env)
    setting = turn_end.parse_setting(read.get(command.FIELDS["TURN_END_TOKENS"]))
    extra = command.extra_args(env)
    model = read.get(command.FIELDS["MODEL"])
    revision = command.extra_value(extra, "--revision") or None
    trust = command.extra_value(extra, "--trust-remote-code") is not None
    loaded = loaded or load_tokenizer(env)
    tokenizer = loaded.tokenizer
    if tokenizer is None:
        if setting not in (turn_end.AUTO, turn_end.MODEL):
            raise EnvError(
                f"TURN_END_TOKENS={','.join(setting)} names tokens, but {loaded.why}; fix MODEL's access "
                "(HF_TOKEN, HF_HOME) or set TURN_END_TOKENS=auto"
            )
        return turn_end.decide(setting, None, loaded.why, None, None), None
    config_source = command.extra_value(extra, "--hf-config-path") or model
    # As vLLM's try_get_generation_config: the folder's generation_config.json, else one made from config.json.
    try:
        config = GenerationConfig.from_pretrained(config_source, revision=revision)
    except OSError:
        try:
            config = GenerationConfig.from_model_config(
                AutoConfig.from_pretrained(config_source, revision=revision, trust_remote_code=trust)
            )
        except OSError:
            config = None
    config_eos = getattr(config, "eos_token_id", None)
    plan = turn_end.plan_for_tokenizer(tokenizer, config_eos, setting, _template_kwargs(read))
    if plan.eos_token_id is None or set(plan.eos_token_id) == set(turn_end.as_ids(config_eos)):
        return plan, None
    config = config or GenerationConfig()
    ids = list(plan.eos_token_id)
    config.eos_token_id = ids[0] if len(ids) == 1 else ids
    out_dir.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(out_dir)
    return plan, str(out_dir)
