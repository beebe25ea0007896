"""The tiny causal LM behind the mock engine: sampling, real processed logprobs, weight updates.

Logprobs are what vLLM reports with `--logprobs-mode processed_logprobs`: log_softmax of the logits
after the request's processing (temperature, then top-k / top-p / min-p masking). A trainer recomputing
log_softmax(logits / T) over the same weights gets the same number, which is what GRPO's importance ratio
needs; the mock's own masking of a tool call's unsafe characters (`sample` with `banned`) changes what can be
drawn, never what is reported.

Concurrency: each request runs in its own thread; the model lock is held for one forward step at a
time, so concurrent requests interleave token by token (a poor man's continuous batching) and a
weight update lands between steps. While paused (TRL's `/pause?mode=keep`) generation waits before its
next step and resumes on the new weights with its KV cache kept, as vLLM's keep mode does.
"""

from __future__ import annotations

import math
import random
import threading
from dataclasses import dataclass, field

import torch

# vLLM reports -inf logprobs (masked tokens) as this sentinel.
NEG_INF_LOGPROB = -9999.0


@dataclass
class Sampling:
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    seed: int | None = None
    top_logprobs: int = 0
    raw_logprobs: bool = False  # fault switch: report pre-temperature logprobs (vLLM's default raw mode)


@dataclass
class Generation:
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    top_logprobs: list[list[tuple[int, float]]] = field(default_factory=list)
    finish_reason: str = "length"


class WeightUpdateError(ValueError):
    pass


class TinyLM:
    def __init__(self, model_dir: str, max_model_len: int, max_new_tokens: int):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.model_dir = model_dir
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        self.max_model_len = max_model_len
        self.max_new_tokens = max_new_tokens
        # The stop set, as the engine's: TURN_END_TOKENS decides it (use_stops; stack/serving/turn_end.py). Until
        # then the chat template's turn end alone (<|im_end|>). Stopping on <|endoftext|> too forked
        # conversations: the template re-renders every assistant turn with <|im_end|>, so a turn that ended
        # on the other token no longer prefixes the next prompt (measured: 1 fork in 36 free-sampled turns).
        # Sampled mid-turn, <|endoftext|> is content, and re-encoding the content gives the same id back
        # (as from vLLM 0.31 when tools are offered: its hermes parser turns skip_special_tokens off; without
        # tools vLLM drops special tokens from the text, which the mock does not model).
        self.turn_end = self.tokenizer.eos_token_id
        self.eos_ids = {self.turn_end}
        # The model's other stop token (<|endoftext|>), the one the `turn_end_other` fault ends turns on.
        self.other_end: int | None = None
        self.lock = threading.Lock()
        self.running = threading.Event()
        self.running.set()
        self.weight_version = 0
        self._staged: dict[str, torch.Tensor] | None = None
        self._declared: set[str] | None = None

    def use_stops(self, plan) -> None:
        """Stop where the engine would under TURN_END_TOKENS (a stack.serving.turn_end.Plan)."""
        self.eos_ids = set(plan.stops)
        if plan.turn_end is not None:
            self.turn_end = plan.turn_end
        self.other_end = next((t for t in plan.model_stops if t != self.turn_end), None)

    # ---- text ---------------------------------------------------------------------------------
    def render_chat(
        self, messages: list[dict], tools: list | None, add_generation_prompt: bool, template_kwargs: dict | None
    ) -> list[int]:
        text = self.tokenizer.apply_chat_template(
            messages,
            tools=tools or None,
            add_generation_prompt=add_generation_prompt,
            tokenize=False,
            **(template_kwargs or {}),
        )
        return self.encode(text)

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    def token_text(self, token_id: int) -> str:
        return self.tokenizer.convert_ids_to_tokens(token_id)

    # ---- distributions ------------------------------------------------------------------------
    @staticmethod
    def _process(logits: torch.Tensor, s: Sampling) -> torch.Tensor:
        """Log-probs of the distribution the next token is drawn from (vLLM's processed_logprobs)."""
        greedy = s.temperature < 1e-5
        scaled = logits if greedy else logits / s.temperature
        if s.top_k and s.top_k > 0 and s.top_k < scaled.numel():
            kth = torch.topk(scaled, s.top_k).values[-1]
            scaled = scaled.masked_fill(scaled < kth, -math.inf)
        logp = torch.log_softmax(scaled, -1)
        if s.min_p and s.min_p > 0:
            logp = torch.log_softmax(logp.masked_fill(logp < logp.max() + math.log(s.min_p), -math.inf), -1)
        if s.top_p < 1.0:
            sorted_lp, order = torch.sort(logp, descending=True)
            cum = torch.cumsum(sorted_lp.exp(), -1)
            drop = cum - sorted_lp.exp() >= s.top_p  # keep the smallest prefix reaching top_p
            mask = torch.zeros_like(logp, dtype=torch.bool).scatter(0, order, drop)
            logp = torch.log_softmax(logp.masked_fill(mask, -math.inf), -1)
        return logp

    def _record(self, gen: Generation, logits: torch.Tensor, logp: torch.Tensor, token: int, s: Sampling) -> None:
        reported = torch.log_softmax(logits, -1) if s.raw_logprobs else logp
        gen.token_ids.append(token)
        gen.logprobs.append(_finite(reported[token].item()))
        k = max(int(s.top_logprobs or 0), 0)
        if k:
            values, ids = torch.topk(reported, min(k, reported.numel()))
            gen.top_logprobs.append([(int(i), _finite(v)) for v, i in zip(values.tolist(), ids.tolist())])
        else:
            gen.top_logprobs.append([])

    def _forward(self, ids: list[int], cache) -> torch.Tensor:
        self.running.wait()
        with self.lock:
            out = self.model(input_ids=torch.tensor([ids]), past_key_values=cache, use_cache=cache is not None)
        return out.logits[0]

    # ---- generation ---------------------------------------------------------------------------
    def sample(
        self,
        prompt_ids: list[int],
        s: Sampling,
        banned: frozenset[int] = frozenset(),
        stop_ids: frozenset[int] | None = None,
        detour: int | None = None,
    ) -> Generation:
        """Sample up to `s.max_tokens` tokens, ending after a token in `stop_ids` (default: end of turn).

        `detour` (the `turn_end_other` fault): where the policy samples the chat template's turn end it
        writes `detour` first, reported with that token's own logprob there. The turn ends on it when it is
        in the stop set; otherwise it is content and the policy closes the turn right after it.

        `banned` tokens are masked before sampling (a banned token is never the sampled one), but the reported
        logprobs are those of the full-vocabulary processed distribution: what the trainer scores, log_softmax of
        logits / T over every token (TRL's ratio compares it with exactly that). Reporting the masked
        distribution instead made every sampled token's logprob higher by the banned mass, a mismatch the
        trainer cannot reproduce."""
        from transformers import DynamicCache

        stop_ids = self.eos_ids if stop_ids is None else stop_ids
        mask = torch.tensor(sorted(banned), dtype=torch.long) if banned else None
        rng = torch.Generator().manual_seed(s.seed if s.seed is not None else random.getrandbits(63))
        gen = Generation()
        cache = DynamicCache()
        with torch.inference_mode():
            logits = self._forward(prompt_ids, cache)[-1]
            for step in range(s.max_tokens):
                logp = self._process(logits, s)
                drawn = logp if mask is None else self._process(logits.index_fill(0, mask, -math.inf), s)
                if s.temperature < 1e-5:
                    token = int(torch.argmax(drawn))
                else:
                    token = int(torch.multinomial(drawn.exp(), 1, generator=rng))
                if detour is not None and token == self.turn_end:
                    self._record(gen, logits, logp, detour, s)
                    if detour in stop_ids:
                        gen.finish_reason = "stop"
                        break
                    if step + 1 >= s.max_tokens:
                        break
                    logits = self._forward([detour], cache)[-1]
                    logp = self._process(logits, s)
                self._record(gen, logits, logp, token, s)
                if token in stop_ids:
                    gen.finish_reason = "stop"
                    break
                if step + 1 < s.max_tokens:
                    logits = self._forward([token], cache)[-1]
        return gen

    def score(self, prompt_ids: list[int], forced: list[int], s: Sampling) -> Generation:
        """Report `forced` as if sampled: the model's real processed logprobs of exactly those tokens."""
        gen = Generation(finish_reason="stop" if forced and forced[-1] in self.eos_ids else "length")
        with torch.inference_mode():
            logits = self._forward(prompt_ids + forced, None)
            for i, token in enumerate(forced):
                row = logits[len(prompt_ids) - 1 + i]
                self._record(gen, row, self._process(row, s), token, s)
        return gen

    def sample_command(
        self, prompt_ids: list[int], prefix: str, suffix: str, s: Sampling, max_command_tokens: int
    ) -> Generation:
        """A tool call whose argument the model writes itself: `prefix` (up to the opening quote of the
        command string) and `suffix` are forced and scored, the command is sampled until the model emits
        the closing quote (or `max_command_tokens`). Characters that would break the JSON string
        (backslash, control characters, special tokens) are masked while sampling it.

        Why: a free sample from a tiny random model is never a valid tool call, and mini-swe-agent drops
        such a turn from its history before the next call, so that call's prompt no longer extends the
        previous one: the rollout forks. A call the agent accepts keeps every turn chained, while its
        command is still the model's own (and, from an untrained model, wrong: reward 0)."""
        quote = self.encode('"')[0]
        banned = frozenset(
            i
            for i in range(len(self.tokenizer))
            if i in self.tokenizer.all_special_ids or self.tokenizer.decode([i]) in ("\\", "\n", "\r", "\t")
        )
        head_ids = self.encode(prefix)
        head = self.score(prompt_ids, head_ids, s)
        body = self.sample(
            prompt_ids + head_ids,
            Sampling(**{**s.__dict__, "max_tokens": max_command_tokens}),
            banned=banned,
            stop_ids=frozenset({quote}),
        )
        tail_ids = (
            ([] if body.finish_reason == "stop" else [quote]) + self.encode(suffix) + [self.tokenizer.eos_token_id]
        )
        tail = self.score(prompt_ids + head_ids + body.token_ids, tail_ids, s)
        gen = Generation(finish_reason="stop")
        for part in (head, body, tail):
            gen.token_ids += part.token_ids
            gen.logprobs += part.logprobs
            gen.top_logprobs += part.top_logprobs
        return gen

    # ---- weights ------------------------------------------------------------------------------
    def manifest(self) -> dict:
        """Names, dtypes and shapes in TRL's weight_update_info shape (named_parameters order)."""
        names, dtypes, shapes = [], [], []
        for name, param in self.model.named_parameters():
            names.append(name)
            dtypes.append(str(param.dtype).removeprefix("torch."))
            shapes.append(list(param.shape))
        return {"names": names, "dtype_names": dtypes, "shapes": shapes}

    def start_update(self) -> None:
        self._staged, self._declared = {}, None

    def declare(self, update_info: dict) -> None:
        """Check a TRL-style manifest against the served model before any bytes move."""
        self._require_started()
        params = dict(self.model.named_parameters())
        names = update_info.get("names") or []
        dtypes = update_info.get("dtype_names") or []
        shapes = update_info.get("shapes") or []
        if not (len(names) == len(dtypes) == len(shapes)):
            raise WeightUpdateError("update_info names, dtype_names and shapes differ in length")
        for name, dtype, shape in zip(names, dtypes, shapes):
            self._check(params, name, dtype, list(shape))
        self._declared = set(names)

    def receive(self, tensors: dict[str, torch.Tensor]) -> int:
        self._require_started()
        params = dict(self.model.named_parameters())
        for name, tensor in tensors.items():
            self._check(params, name, str(tensor.dtype).removeprefix("torch."), list(tensor.shape))
            self._staged[name] = tensor.clone()
        return len(self._staged)

    def finish_update(self, serve: bool = True) -> dict:
        """Swap every staged tensor in at once (between two forward steps), or nothing. `serve=False` is the
        `weights_not_served` fault: the update is acknowledged and counted, and the old weights stay."""
        staged, declared = self._staged, self._declared
        self._staged, self._declared = None, None
        if staged is None:
            raise WeightUpdateError("finish_weight_update without start_weight_update")
        missing = sorted(declared - set(staged)) if declared is not None else []
        if missing:
            raise WeightUpdateError(
                f"{len(missing)} declared parameters never arrived (first: {missing[0]}); nothing was applied"
            )
        params = dict(self.model.named_parameters())
        with self.lock, torch.no_grad():
            for name, tensor in staged.items():
                if serve:
                    params[name].copy_(tensor)
            if staged:
                self.weight_version += 1
        untouched = len(params) - len(staged)
        return {"updated": len(staged), "untouched": untouched, "weight_version": self.weight_version}

    def _require_started(self) -> None:
        if self._staged is None:
            raise WeightUpdateError("call /start_weight_update before sending weights")

    @staticmethod
    def _check(params: dict, name: str, dtype: str, shape: list[int]) -> None:
        param = params.get(name)
        if param is None:
            raise WeightUpdateError(f"unknown parameter {name!r}: the trainer's model is not the served model")
        want_dtype, want_shape = str(param.dtype).removeprefix("torch."), list(param.shape)
        if dtype != want_dtype or shape != want_shape:
            raise WeightUpdateError(
                f"parameter {name!r} is {dtype}{shape} from the trainer but {want_dtype}{want_shape} here"
            )


def _finite(value: float) -> float:
    return value if math.isfinite(value) else NEG_INF_LOGPROB
