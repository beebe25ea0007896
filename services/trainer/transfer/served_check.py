"""After each weight push: does the engine serve the weights that were pushed? A canary, scored on both sides.

Why: a push can be acknowledged and not served (a vLLM that reloaded the base weights, a transfer that wrote
nowhere, the mock's `weights_not_served` fault). No handshake sees it; the rollouts then come from other weights
than TRL's version says, and the run trains on nothing it believes. The mock's private `/mock/weight_manifest`
counter (weights.served_version) sees only the mock; vLLM reports no such figure. What both engines do serve is
`/v1/completions` with the sampled tokens' ids and logprobs.

So, right after each push's `resume()`, ONE short request: a fixed prompt, CANARY_TOKENS tokens sampled at
temperature 1 with every truncation off (top_p 1, top_k -1, min_p 0, so processed logprobs are plain log-softmax)
and a fixed seed. The trainer scores the same prompt + sampled ids with the model it just pushed (one forward of a
few dozen tokens). The gap is the mean |engine - trainer| logprob over the sampled tokens.

The tolerance, TOLERANCE_NATS = 0.3: engine vs transformers on the SAME bf16 weights differ by 0.04-0.06 nats mean
and at most 0.27 on one token (measured on one H200, vLLM 0.25.1, issue 36), so even a one-token mean of pure
kernel noise stays under it. What it catches: weights that differ by what training moves them. Measured in the same
session, pushing real weights over random ones moved the served logprobs by 3.1-4.1 nats mean, and re-pushing
identical weights by 0.000. In the CPU form both sides are float32 and agree to ~1e-8 (tests/learning's
FRESH_KL_BOUND), so there the tolerance is FLOAT32_TOLERANCE_NATS (0.01), chosen by `attach` from the trainer's compute
dtype: on one H200 the learning gate's control drifted only 0.040 -> 0.281 nats in 15 steps at lr 3e-4, never past
0.3, while in float32 one such step is past 0.01. A push that did not land after ONE
step at a production learning rate (1e-6) moves the policy far less than the kernel noise: this check sees a missed
push once the pushed weights have drifted past the tolerance from the served ones, not at the first miss.

Verdict `WeightsNotServed` (an EngineGone, so train.py saves the step and stops with one line, exit 4, as for a lost
engine). Figures every step: `weights/served_gap_nats`, `weights/served_gap_max_nats`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import httpx

from ..watch.engine_gone import EngineGone
from .transfer_wrapper import TransferWrapper

log = logging.getLogger(__name__)

TOLERANCE_NATS = 0.3
# Where both sides compute in float32 (the CPU form: the mock engine and a trainer without autocast), they agree to
# ~1e-8 in KL at fresh steps (tests/learning's FRESH_KL_BOUND), so 0.3 would let a missed push run on for most of a
# night: on one H200 the learning gate's control (pushes skipped, lr 3e-4, same canary) drifted 0.040 -> 0.281 nats
# over 15 steps and was never stopped at 0.3 (docs/LEARNING.md). A hundredth of a nat is still far above float32
# noise and below one step of that drift.
FLOAT32_TOLERANCE_NATS = 0.01
CANARY_PROMPT = "def fibonacci(n):\n    "
CANARY_TOKENS = 16
CANARY_SEED = 1234
REQUEST_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Canary:
    """What the engine sampled for the canary: the full ids (prompt + sampled), and each sampled token's logprob."""

    ids: list[int]
    sampled: int  # how many of the ids, at the end, were sampled (and carry `logprobs`)
    logprobs: list[float]


class CanaryUnavailable(RuntimeError):
    """The engine's answer cannot be checked (no token ids): the check says so once and stays off."""


def engine_canary(engine_url: str, model: str | None, timeout_s: float = REQUEST_TIMEOUT_S) -> Canary:
    """One `/v1/completions` request: the canary's prompt ids, sampled ids and their logprobs."""
    body = {
        "prompt": CANARY_PROMPT,
        "max_tokens": CANARY_TOKENS,
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": -1,
        "min_p": 0.0,
        "seed": CANARY_SEED,
        "logprobs": 0,
        "return_token_ids": True,
    }
    if model:
        body["model"] = model
    resp = httpx.post(f"{engine_url.rstrip('/')}/v1/completions", json=body, timeout=timeout_s)
    resp.raise_for_status()
    choice = resp.json()["choices"][0]
    prompt_ids, token_ids = choice.get("prompt_token_ids"), choice.get("token_ids")
    logprobs = (choice.get("logprobs") or {}).get("token_logprobs")
    if not prompt_ids or not token_ids or not logprobs:
        raise CanaryUnavailable(
            "the engine's /v1/completions answer has no prompt_token_ids, token_ids or token_logprobs"
        )
    n = min(len(token_ids), len(logprobs))
    return Canary(ids=list(prompt_ids) + list(token_ids[:n]), sampled=n, logprobs=[float(x) for x in logprobs[:n]])


def served_model(engine_url: str, timeout_s: float = REQUEST_TIMEOUT_S) -> str | None:
    """The id the engine serves under (/v1/models, vLLM's and the mock's), or None to let the engine pick."""
    try:
        data = httpx.get(f"{engine_url.rstrip('/')}/v1/models", timeout=timeout_s).json()["data"]
        return str(data[0]["id"]) if data else None
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError):
        return None


def linear_tree(model, n: int, device) -> dict:
    """The extra arguments the trainer's attention needs for one plain sequence of `n` tokens.

    AsyncGRPO trains with its own attention (TRL 1.16.0 `experimental/async_grpo/packing.py`, `tree_attention`,
    registered as "tree_fa3"), which takes the packed tree's layout as keyword arguments and has no default for them:
    a plain forward of the trainer's model fails with "tree_attention() missing 5 required keyword-only arguments"
    (seen on the first canary of a CPU dry run). One sequence is a tree of one path: every position attends to the
    ones before it, one segment [0, n). Any other attention takes no extra arguments."""
    if getattr(model.config, "_attn_implementation", None) != "tree_fa3":
        return {}
    import torch

    bounds = torch.tensor([0, n], dtype=torch.int32, device=device)
    return {
        "position_ids": torch.arange(n, device=device)[None],
        "tree_kv_index": torch.arange(n, dtype=torch.long, device=device),
        "tree_cu_seqlens_q": bounds,
        "tree_cu_seqlens_k": bounds,
        "tree_max_seqlen_q": n,
        "tree_max_seqlen_k": n,
    }


def model_scorer(model) -> Callable[[list[int], int], list[float]]:
    """The trainer's side: log-softmax logprobs of the last `sampled` ids given the ones before, from `model` as it
    is now (the weights just pushed). No gradient; the compute dtype of training (bf16 autocast on a GPU)."""

    def score(ids: list[int], sampled: int) -> list[float]:
        import torch

        device = next(model.parameters()).device
        was_training = model.training
        model.eval()
        try:
            with (
                torch.no_grad(),
                torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"),
            ):
                x = torch.tensor([ids], device=device)
                logits = model(input_ids=x, use_cache=False, **linear_tree(model, len(ids), device)).logits[0, :-1]
                logits = logits.float()
            logp = torch.log_softmax(logits, -1).gather(-1, x[0, 1:, None])[:, 0]
            return logp[-sampled:].tolist()
        finally:
            model.train(was_training)

    return score


def gap(engine: Sequence[float], trainer: Sequence[float]) -> tuple[float, float]:
    """(mean, max) |engine - trainer| over the sampled tokens."""
    diffs = [abs(a - b) for a, b in zip(engine, trainer, strict=True)]
    return sum(diffs) / len(diffs), max(diffs)


class WeightsNotServed(EngineGone):
    """The engine answers, but not with the weights that were pushed: the run stops as for a lost engine."""

    def reason(self) -> str:
        return f"the engine at {self.engine_url} does not serve the weights the trainer pushed: {self.what} ({self.detail})"


class ServedWeights(TransferWrapper):
    """Any weight-transfer backend; after each `resume()` the canary is scored by the engine and by the trainer.

    `scorer` is set once the trainer's model exists (`attach`); until then, and on an engine whose answer carries no
    token ids, there is no verdict (figures absent), never a stop."""

    def __init__(
        self,
        inner,
        engine_url: str,
        tolerance: float | None = None,
        canary: Callable[[str, str | None], Canary] = engine_canary,
        model_id: Callable[[str], str | None] = served_model,
    ):
        super().__init__(inner)
        self.engine_url = engine_url
        # None: set by `attach` from the trainer's compute dtype (bf16 autocast on a GPU, float32 on a CPU).
        self.tolerance = tolerance
        self.noise = "bf16 kernel noise"
        self.canary = canary
        self.model_id = model_id
        self.scorer: Callable[[list[int], int], list[float]] | None = None
        self.pushes = 0
        self.gap_mean: float | None = None
        self.gap_max: float | None = None
        self.unavailable: str | None = None
        self._model: str | None = None

    def attach(self, model) -> None:
        self.scorer = model_scorer(model)
        if self.tolerance is None:
            # model_scorer computes in float32 on a CPU (no autocast): the CPU form, whose mock engine is float32 too.
            float32 = next(model.parameters()).device.type == "cpu"
            self.tolerance = FLOAT32_TOLERANCE_NATS if float32 else TOLERANCE_NATS
            self.noise = "float32 noise" if float32 else "bf16 kernel noise"

    def resume(self) -> None:
        self.inner.resume()
        self.pushes += 1
        if self.scorer is None or self.unavailable:
            return
        t0 = time.monotonic()
        try:
            if self._model is None:
                self._model = self.model_id(self.engine_url)
            canary = self.canary(self.engine_url, self._model)
        except CanaryUnavailable as exc:
            self.unavailable = str(exc)
            log.warning("served-weights check off for this run: %s", exc)
            return
        except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
            # A lost engine is the next push's or the health watch's to stop on; one missed canary decides nothing.
            log.warning("served-weights check skipped after push %d: %s: %s", self.pushes, type(exc).__name__, exc)
            return
        mine = self.scorer(canary.ids, canary.sampled)
        self.gap_mean, self.gap_max = gap(canary.logprobs, mine)
        log.info(
            "push %d: served-vs-pushed canary gap %.4f nats mean, %.4f max over %d tokens (%.2f s)",
            self.pushes,
            self.gap_mean,
            self.gap_max,
            canary.sampled,
            time.monotonic() - t0,
        )
        if self.gap_mean > (TOLERANCE_NATS if self.tolerance is None else self.tolerance):
            raise WeightsNotServed(
                self.engine_url,
                f"after weight push {self.pushes} its logprobs on a {canary.sampled}-token canary differ from the "
                f"trainer's by {self.gap_mean:.3f} nats mean (max {self.gap_max:.3f}), above the "
                f"{TOLERANCE_NATS if self.tolerance is None else self.tolerance:g} nats that {self.noise} stays under",
                0.0,
                "the push was acknowledged but the engine kept or reloaded other weights; check `docker compose logs "
                "engine` for a restart or a failed weight load",
            )

    def metrics(self) -> dict[str, float]:
        if self.gap_mean is None:
            return {}
        return {"weights/served_gap_nats": self.gap_mean, "weights/served_gap_max_nats": self.gap_max}
