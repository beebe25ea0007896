"""Which tokens end a turn: the engine's stop set made to agree with the chat template's turn end.

A turn chains onto the next only if the next prompt, rendered by the chat template, starts with the ids
that were sampled. Qwen3's generation config stops on `<|im_end|>` and `<|endoftext|>`, but its template
closes every assistant turn with `<|im_end|>`: a turn that ended on `<|endoftext|>` comes back with
`<|im_end|>` in its place, and TRL's reconciler (fork threshold 0 under OpenEnv's lossless capture) forks
the rollout. Measured on two H200s with random weights: 55% of 3-turn rollouts forked (docs/GPU-STACK.md).

The turn end is read from the template itself: render user / assistant / user, and the token right after
the assistant's reply is the one that closes its turn (`template_turn_end`). TURN_END_TOKENS then decides
the stop set (`decide`): `auto` stops on that token alone, `model` keeps the model's generation config as
vLLM reads it, a comma-separated list of tokens names the set outright.

Why the engine and not the request path, read in vLLM 0.31.0 (`sampling_params.update_from_generation_
config`, `v1/engine/input_processor.py`, `config/model.py`): vLLM always stops on the tokenizer's
eos_token, and adds every `eos_token_id` of the generation config it loads: the model folder's for
`--generation-config auto` and `vllm` alike, or the folder `--generation-config <dir>` names.
`--override-generation-config` is NOT read for stops (only for sampling defaults), and a request's
`stop_token_ids` can add a stop but never remove one. So the launcher writes the model's own generation
config with `eos_token_id` set to the stop set into a folder of its own and passes `--generation-config`
(engine/stops.py); the sampling defaults stay the model's. The capture proxy could only get
there with `ignore_eos` plus `stop_token_ids` on every call, which would still leave the engine's other
callers on the model's stop set.

With the stop set agreed, a policy that writes `<|endoftext|>` where it would end its turn writes on and
closes the turn with `<|im_end|>`; the other token stays in the reply's text (vLLM 0.31's hermes parser sets
`skip_special_tokens=False` whenever tools are offered, as mini-swe-agent's calls offer them), so the next
prompt re-renders it and the turn chains. What it cannot fix:
  - a tokenizer whose eos_token is not the turn end (vLLM stops on it regardless): the line names the fix;
  - the other token after a tool call: the hermes parser keeps only the text BEFORE the first call, so
    anything written after the last `</tool_call>` is gone from the message and that rollout forks whatever
    the stop set (as any trailing text after a call does);
  - a call made without tools: vLLM's default `skip_special_tokens=True` drops a special token from the text.

Standard library only (the probe reads the record in the vLLM and mock images); the tokenizer is any
object with transformers' `apply_chat_template` / `encode` / `convert_ids_to_tokens`.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from stack.env import EnvError

SETTING = "TURN_END_TOKENS"
AUTO = "auto"
MODEL = "model"
FIX = f"set {SETTING} to auto, model, or a comma-separated list of tokens, e.g. <|im_end|>"
# The assistant's reply in the rendered probe conversation: plain ASCII, which no template rewrites.
MARKER = "TURN-END-PROBE-REPLY"
CONVERSATION = (
    {"role": "user", "content": "Say something."},
    {"role": "assistant", "content": MARKER},
    {"role": "user", "content": "Again."},
)
# The verdict line of the engine this container started, for the healthcheck (a fresh process each time).
RECORD = Path(tempfile.gettempdir()) / "asyncgrpo-engine-turn-end"


def parse_setting(raw: str) -> str | tuple[str, ...]:
    """TURN_END_TOKENS as given: AUTO, MODEL, or the tokens it lists (checked against the tokenizer later)."""
    value = (raw or "").strip() or AUTO
    if value.lower() in (AUTO, MODEL):
        return value.lower()
    tokens = tuple(t.strip() for t in value.split(","))
    if not all(tokens):
        raise EnvError(f"{SETTING}={value!r} has an empty entry: {FIX}")
    return tokens


def _specials(tokenizer) -> set[int]:
    ids = set(getattr(tokenizer, "all_special_ids", None) or ())
    added = getattr(tokenizer, "added_tokens_decoder", None) or {}
    ids.update(i for i, tok in added.items() if getattr(tok, "special", True))
    return ids


def template_turn_end(tokenizer, template_kwargs: dict | None = None) -> tuple[int | None, str]:
    """(the id of the token that closes an assistant turn in the chat template, "") or (None, why not)."""
    try:
        text = tokenizer.apply_chat_template(
            list(CONVERSATION), tokenize=False, add_generation_prompt=False, **(template_kwargs or {})
        )
    except Exception as exc:  # a template may raise anything (jinja's own exceptions included)
        return None, f"the chat template did not render a user/assistant/user conversation ({exc})"
    at = text.find(MARKER) if isinstance(text, str) else -1
    if at < 0:
        return None, "the chat template dropped the assistant's reply"
    after = text[at + len(MARKER) :]
    ids = tokenizer.encode(after, add_special_tokens=False) if after else []
    if not ids:
        return None, "the chat template renders nothing after the assistant's reply"
    if ids[0] not in _specials(tokenizer):
        return None, f"the chat template closes an assistant turn with plain text ({after[:16]!r}), not a token"
    return ids[0], ""


def token_ids(names: Sequence[str], lookup: Callable[[str], int | None]) -> tuple[int, ...]:
    """TURN_END_TOKENS' tokens as ids; each must be one token of this tokenizer (or a plain id)."""
    out = []
    for name in names:
        tid = int(name) if name.isdigit() else lookup(name)
        if tid is None:
            raise EnvError(f"{SETTING} names {name!r}, which is not one token of this model's tokenizer: {FIX}")
        out.append(tid)
    return tuple(dict.fromkeys(out))


def as_ids(value) -> tuple[int, ...]:
    if value is None:
        return ()
    return (value,) if isinstance(value, int) else tuple(value)


@dataclass(frozen=True)
class Plan:
    """The engine's stop set under TURN_END_TOKENS, and the one line that explains it."""

    setting: str  # TURN_END_TOKENS as the operator wrote it (auto by default)
    turn_end: int | None  # the token that closes an assistant turn in the chat template (None: unknown)
    why_unknown: str  # why turn_end is None
    tokenizer_eos: int | None  # vLLM stops on it whatever the generation config says
    model_stops: tuple[int, ...]  # what vLLM would stop on with the model's own generation config
    stops: tuple[int, ...]  # what the engine stops on under this plan
    eos_token_id: tuple[int, ...] | None  # the generation config's eos_token_id to write; None: the model's
    names: dict[int, str] = field(default_factory=dict)

    def name(self, tid: int) -> str:
        return f"{self.names.get(tid, '?')} ({tid})"

    def names_of(self, ids: Iterable[int]) -> str:
        return ", ".join(self.name(t) for t in ids)

    @property
    def extra(self) -> tuple[int, ...]:
        """Stops the chat template never renders at a turn's end: a turn ending there forks its rollout."""
        return () if self.turn_end is None else tuple(t for t in self.stops if t != self.turn_end)

    @property
    def agrees(self) -> bool:
        return self.turn_end is not None and self.stops == (self.turn_end,)

    def line(self) -> str:
        """One line: the turn end, the stop set, and when they disagree what happens and which setting fixes it."""
        setting = f"{SETTING}={self.setting}"
        if self.turn_end is None:
            stops = f"stops on {self.names_of(self.stops)}" if self.stops else "keeps the model's own stop set"
            return (
                f"turn end unknown ({self.why_unknown}): the engine {stops} ({setting}); if a turn can end on a "
                f"token the chat template does not render there, that rollout forks: set {SETTING} to the token "
                "that closes an assistant turn"
            )
        end = self.name(self.turn_end)
        if self.turn_end not in self.stops:
            return (
                f"turn ends DISAGREE: the engine stops on {self.names_of(self.stops)} ({setting}) but not on the "
                f"chat template's turn end {end}: a turn runs past it to max_tokens; set {SETTING}=auto"
            )
        if self.tokenizer_eos in self.extra:
            return (
                f"turn ends DISAGREE: the chat template closes an assistant turn with {end}, but vLLM always stops "
                f"on the tokenizer's eos_token {self.name(self.tokenizer_eos)}: a turn ending there forks its "
                f"rollout (the next prompt renders {end} in its place); serve a tokenizer whose eos_token is "
                f"{self.names.get(self.turn_end, end)} (vLLM's --tokenizer in ENGINE_EXTRA_ARGS)"
            )
        if self.extra:
            return (
                f"turn ends DISAGREE: the engine stops on {self.names_of(self.stops)} ({setting}), but the chat "
                f"template closes an assistant turn with {end} only: a turn ending on {self.names_of(self.extra)} "
                f"forks its rollout (the next prompt renders {end} in its place); set {SETTING}=auto"
            )
        dropped = [t for t in self.model_stops if t not in self.stops]
        if dropped:
            return (
                f"turn end {end}: the engine stops on it alone ({setting}); the model's generation config also "
                f"stops on {self.names_of(dropped)}, which the chat template never renders at a turn's end "
                f"(a turn ending there would fork its rollout); {SETTING}=model keeps the model's stops"
            )
        return f"turn end {end}: the engine's stop set and the chat template's turn end agree ({setting})"


def decide(
    setting: str | tuple[str, ...],
    turn_end: int | None,
    why_unknown: str,
    tokenizer_eos: int | None,
    config_eos,
    lookup: Callable[[str], int | None] = lambda _name: None,
    names: dict[int, str] | None = None,
) -> Plan:
    """The stop set for TURN_END_TOKENS (`setting`, from parse_setting), as vLLM 0.31 would apply it.

    `config_eos` is the model's generation config `eos_token_id` (int, list or None). vLLM stops on the
    tokenizer's eos_token in every case, so it stays in `stops` even where the written config leaves it out.
    """
    model_stops = tuple(dict.fromkeys(as_ids(tokenizer_eos) + as_ids(config_eos)))
    if setting == MODEL or (setting == AUTO and turn_end is None):
        chosen = None
    elif setting == AUTO:
        chosen = (turn_end,)
    else:
        chosen = token_ids(setting, lookup)
    stops = model_stops if chosen is None else tuple(dict.fromkeys(as_ids(tokenizer_eos) + chosen))
    shown = setting if isinstance(setting, str) else ",".join(setting)
    return Plan(
        setting=shown,
        turn_end=turn_end,
        why_unknown=why_unknown,
        tokenizer_eos=tokenizer_eos,
        model_stops=model_stops,
        stops=stops,
        eos_token_id=chosen,
        names=dict(names or {}),
    )


def plan_for_tokenizer(
    tokenizer, config_eos, setting: str | tuple[str, ...], template_kwargs: dict | None = None
) -> Plan:
    """decide() for a loaded tokenizer: the template's turn end, its eos_token, readable token names."""
    turn_end, why = template_turn_end(tokenizer, template_kwargs)
    unk = getattr(tokenizer, "unk_token_id", None)

    def lookup(name: str) -> int | None:
        tid = tokenizer.convert_tokens_to_ids(name)
        return None if tid is None or tid == unk or not isinstance(tid, int) else tid

    eos = tokenizer.eos_token_id
    plan = decide(setting, turn_end, why, eos, config_eos, lookup)
    ids = set(plan.model_stops) | set(plan.stops) | ({turn_end} if turn_end is not None else set())
    return Plan(**{**plan.__dict__, "names": {i: str(tokenizer.convert_ids_to_tokens(i)) for i in sorted(ids)}})


def write_record(line: str, path: Path | None = None) -> None:
    try:
        (path or RECORD).write_text(line + "\n")
    except OSError:
        pass  # the probe then says nothing about turn ends; the start-up log still has the line


def read_record(path: Path | None) -> str:
    try:
        return path.read_text().strip() if path else ""
    except OSError:
        return ""
