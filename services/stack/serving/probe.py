"""The engine probe: healthy only when a real chat completion comes back trainable.

`/health` is not enough. A vLLM started without `--return-tokens-as-token-ids` and
`--logprobs-mode processed_logprobs` answers `/health` and every chat perfectly, and every training row
built from it is empty or carries the wrong importance ratio, with nothing erroring. So this asks for a
completion and checks what capture needs: top-level `prompt_token_ids`, per-choice `token_ids`, and one
logprob entry per sampled id whose token reads `token_id:<that id>`; then that logprobs follow the
request's temperature (processed, not raw). Each failure names the flag that fixes it.

The temperature test pins the sampling it needs. vLLM applies the model's generation config to every
request that leaves a field unset (Qwen3: top_k 20, top_p 0.95), which can cut the probe's runner-up token
to -9999, and an unmeasurable gap proves nothing. So the probe sends top_k/top_p/min_p that truncate
nothing, and a gap it still cannot measure is UNHEALTHY unless the
operator accepted that very model by name (ENGINE_LOGPROBS_UNPROVEN_OK=<served model id>).

A healthy verdict ends with two lines the launcher left in this container: the turn-end line
(stack/serving/turn_end.py: whether the engine's stop set and the chat template's turn end agree, and which setting
changes it; "turn ends DISAGREE" marks rollouts that will fork, not an unhealthy engine), and the template
line (stack/serving/served_template.py: which chat template is served and whether turns chain under it).

Stdlib only: it runs inside the vLLM image (which may lack requests) and inside the mock engine's, as the
healthcheck `python3 -m engine.probe` (engine/probe.py), and on the host in `scripts/status`.
"""

from __future__ import annotations

import json
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

from stack.endpoints import openai_base
from stack.serving import chain, turn_end

FLAG_IDS = "--return-tokens-as-token-ids"
FLAG_PROCESSED = "--logprobs-mode processed_logprobs"
# Above this a logprob is an engine sentinel for -inf (vLLM uses -9999), not a measurement.
_SENTINEL = 100.0
# Sampling that truncates nothing, so a generation config cannot mask the runner-up token. vLLM 0.31
# reads top_k 0 (or -1) as "all tokens", top_p 1 and min_p 0 as off, repetition_penalty 1 as none; an
# explicit field wins over the generation config's default. Same values as the trainer's policy.
UNTRUNCATED = {"top_k": 0, "top_p": 1.0, "min_p": 0.0, "repetition_penalty": 1.0}
UNPROVEN_OK = "ENGINE_LOGPROBS_UNPROVEN_OK"
# The model this engine container has proven processed logprobs for (healthchecks are fresh processes).
PROVEN_FILE = Path(tempfile.gettempdir()) / "asyncgrpo-engine-logprobs-proven"
# A top-two gap below this is noise to divide by (OpenEnv's validate_llm uses the same bound).
_MIN_GAP = 0.5


class Unhealthy(Exception):
    pass


def _request(url: str, body: dict | None, timeout: float) -> dict:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        detail = exc.read()[:300].decode(errors="replace")
        raise Unhealthy(f"{url} answered HTTP {exc.code}: {detail}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise Unhealthy(
            f"{url} is not reachable ({getattr(exc, 'reason', exc)}); the engine is still starting or died"
        ) from None
    except ValueError:
        raise Unhealthy(f"{url} did not answer JSON") from None


def grade_completion(payload: dict) -> list[str]:
    """Problems with a chat completion's capture fields; each names the fix. Empty means trainable."""
    problems: list[str] = []
    choices = payload.get("choices") or []
    if not choices:
        return ["the completion has no choices"]
    choice = choices[0]
    if not payload.get("prompt_token_ids"):
        problems.append(
            f"no top-level prompt_token_ids: start vLLM with {FLAG_IDS} (and vllm>=0.10.2, which honours "
            "return_token_ids)"
        )
    token_ids = choice.get("token_ids")
    if not token_ids:
        problems.append(f"choices[0].token_ids missing: start vLLM with {FLAG_IDS}")
    content = (choice.get("logprobs") or {}).get("content") or []
    if not content:
        problems.append(f"choices[0].logprobs.content missing: start vLLM with {FLAG_IDS} and {FLAG_PROCESSED}")
    elif token_ids:
        if len(content) != len(token_ids):
            problems.append(
                f"{len(content)} logprob entries for {len(token_ids)} token ids: the channels are misaligned; "
                f"start vLLM with {FLAG_IDS}"
            )
        else:
            for i, (tid, entry) in enumerate(zip(token_ids, content)):
                if (entry or {}).get("token") != f"token_id:{tid}":
                    problems.append(
                        f"logprob entry {i} reads {(entry or {}).get('token')!r}, not 'token_id:{tid}': start "
                        f"vLLM with {FLAG_IDS}"
                    )
                    break
                if (entry or {}).get("logprob") is None:
                    problems.append(f"logprob entry {i} has no logprob value: start vLLM with {FLAG_PROCESSED}")
                    break
    elif not str((content[0] or {}).get("token", "")).startswith("token_id:"):
        problems.append(f"logprob tokens are strings, not 'token_id:N': start vLLM with {FLAG_IDS}")
    return problems


def measure_gap(payload: dict) -> tuple[float | None, str]:
    """(gap between the two best logprobs at the first position, "") or (None, why it is unmeasurable)."""
    entries = ((payload.get("choices") or [{}])[0].get("logprobs") or {}).get("content") or []
    if not entries:
        return None, "no logprobs came back"
    values = sorted(
        (float(t["logprob"]) for t in (entries[0] or {}).get("top_logprobs") or [] if t.get("logprob") is not None),
        reverse=True,
    )
    if len(values) < 2:
        return None, "fewer than two top_logprobs came back"
    if abs(values[1]) > _SENTINEL:
        return None, f"the runner-up token is masked (logprob {values[1]:g}: the distribution was truncated)"
    return values[0] - values[1], ""


def top_two_gap(payload: dict) -> float | None:
    """Gap between the two best logprobs at the first position, or None when unmeasurable."""
    return measure_gap(payload)[0]


def logprobs_mode(gap_cool: float | None, gap_hot: float | None, cool: float = 1.0, hot: float = 2.0) -> str:
    """ "processed" when the gap scales like cool/hot, "raw" when it stays put, "unknown" if unmeasurable.

    Same method as OpenEnv's validate_llm, so the healthcheck and the env server's probe cannot disagree.
    """
    if gap_cool is None or gap_hot is None or gap_cool < _MIN_GAP:
        return "unknown"
    ratio = gap_hot / gap_cool
    return "raw" if abs(ratio - 1.0) < abs(ratio - cool / hot) else "processed"


def unproven(model: str, why: str, accepted_for: str, proven_before: bool = False) -> str:
    """The verdict on a model whose processed logprobs could not be measured; raises unless accepted by name
    or already proven for this model by this engine (the mode is a launch flag; the weights change)."""
    if proven_before:
        return f"logprobs mode processed (proven earlier for this engine; unmeasurable now: {why})"
    if accepted_for.strip() == model:
        return f"logprobs mode UNPROVEN ({why}), accepted for this model by {UNPROVEN_OK}={model}"
    raise Unhealthy(
        f"processed logprobs not proven for {model}: {why}, at temperature 1.0 and 2.0 with top_k/top_p/min_p "
        f"pinned off. Raw logprobs would give every step a wrong importance ratio: check that `vllm serve` runs "
        f"with {FLAG_PROCESSED} (`docker compose logs engine | head -3`), then accept this model with "
        f"{UNPROVEN_OK}={model} in .env"
    )


def probe(
    base: str,
    timeout: float = 20.0,
    accepted_for: str = "",
    proven_file: Path | None = None,
    turn_end_file: Path | None = None,
    chain_file: Path | None = None,
) -> str:
    """One-line verdict when healthy; raises Unhealthy with the reason otherwise. `turn_end_file`, `chain_file`:
    the launcher's turn-end record and its served-template / turns-chain record, appended when there."""
    api = openai_base(base)  # `base` is the engine's root, as ENGINE_URL is everywhere
    models = _request(f"{api}/models", None, timeout).get("data") or []
    if not models:
        raise Unhealthy(f"{api}/models lists no model: the engine has not loaded one")
    model = models[0]["id"]
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "Reply with the single word: ok"}],
        "max_tokens": 8,
        "temperature": 0.0,
        "logprobs": True,
        "top_logprobs": 1,
        "return_token_ids": True,
    }
    payload = _request(f"{api}/chat/completions", body, timeout)
    problems = grade_completion(payload)
    if problems:
        raise Unhealthy("; ".join(problems))
    gaps: list[float | None] = []
    why = ""
    for temperature in (1.0, 2.0):
        one = {
            "model": model,
            "messages": [{"role": "user", "content": "Reply with exactly: hello"}],
            "max_tokens": 1,
            "temperature": temperature,
            "logprobs": True,
            "top_logprobs": 5,
            **UNTRUNCATED,
        }
        gap, reason = measure_gap(_request(f"{api}/chat/completions", one, timeout))
        gaps.append(gap)
        why = why or (f"{reason} at temperature {temperature:g}" if reason else "")
    mode = logprobs_mode(*gaps)
    if mode == "raw":
        raise Unhealthy(
            f"logprobs did not change between temperature 1.0 and 2.0 (raw, pre-temperature): start vLLM with "
            f"{FLAG_PROCESSED}"
        )
    if mode == "unknown":
        why = why or f"the top-two gap is {gaps[0]:.3f} at temperature 1 (a flat distribution; need >= {_MIN_GAP})"
        verdict = unproven(model, why, accepted_for, _read(proven_file) == model)
    else:
        verdict = f"logprobs mode {mode}"
        # Training moves the weights, and with them the gap this measures; the mode itself is the engine's
        # launch flag. Remembered per engine container, so a gap that drifts flat mid-run stays healthy.
        _write(proven_file, model)
    n_ids = len(payload["choices"][0]["token_ids"])
    records = [line for line in (turn_end.read_record(turn_end_file), chain.read_record(chain_file)) if line]
    return (
        f"engine healthy: {model} returned {len(payload['prompt_token_ids'])} prompt ids, {n_ids} sampled ids "
        f"with aligned token_id logprobs; {verdict}" + "".join(f"; {line}" for line in records)
    )


def _read(path: Path | None) -> str:
    try:
        return path.read_text().strip() if path else ""
    except OSError:
        return ""


def _write(path: Path | None, model: str) -> None:
    if path is None:
        return
    try:
        path.write_text(model)
    except OSError:
        pass  # a read-only /tmp only costs the memory, never the verdict
