"""Engine healthcheck: healthy only when a real chat completion comes back trainable.

`/health` is not enough. A vLLM started without `--return-tokens-as-token-ids` and
`--logprobs-mode processed_logprobs` answers `/health` and every chat perfectly, and every training row
built from it is empty or carries the wrong importance ratio, with nothing erroring. So this asks for a
completion and checks what capture needs: top-level `prompt_token_ids`, per-choice `token_ids`, and one
logprob entry per sampled id whose token reads `token_id:<that id>`; then that logprobs follow the
request's temperature (processed, not raw). Each failure names the flag that fixes it.

Stdlib only: it runs inside the vLLM image (which may lack requests) and inside the mock engine's.
Usage: python3 -m engine.probe [BASE_URL]   (default http://$ENGINE_HOST:$ENGINE_PORT). Exit 0 healthy, 1 not.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request

FLAG_IDS = "--return-tokens-as-token-ids"
FLAG_PROCESSED = "--logprobs-mode processed_logprobs"
# Above this a logprob is an engine sentinel for -inf (vLLM uses -9999), not a measurement.
_SENTINEL = 100.0


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


def top_two_gap(payload: dict) -> float | None:
    """Gap between the two best logprobs at the first position, or None when unmeasurable."""
    entries = ((payload.get("choices") or [{}])[0].get("logprobs") or {}).get("content") or []
    if not entries:
        return None
    values = sorted(
        (float(t["logprob"]) for t in (entries[0] or {}).get("top_logprobs") or [] if t.get("logprob") is not None),
        reverse=True,
    )
    if len(values) < 2 or abs(values[1]) > _SENTINEL:
        return None
    return values[0] - values[1]


def logprobs_mode(gap_cool: float | None, gap_hot: float | None, cool: float = 1.0, hot: float = 2.0) -> str:
    """ "processed" when the gap scales like cool/hot, "raw" when it stays put, "unknown" if unmeasurable.

    Same method as OpenEnv's validate_llm, so the healthcheck and the env server's probe cannot disagree.
    """
    if gap_cool is None or gap_hot is None or gap_cool < 0.5:
        return "unknown"
    ratio = gap_hot / gap_cool
    return "raw" if abs(ratio - 1.0) < abs(ratio - cool / hot) else "processed"


def probe(base: str, timeout: float = 20.0) -> str:
    """One-line verdict when healthy; raises Unhealthy with the reason otherwise."""
    base = base.rstrip("/")
    if base.endswith("/v1"):
        base = base[: -len("/v1")]
    models = _request(f"{base}/v1/models", None, timeout).get("data") or []
    if not models:
        raise Unhealthy(f"{base}/v1/models lists no model: the engine has not loaded one")
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
    payload = _request(f"{base}/v1/chat/completions", body, timeout)
    problems = grade_completion(payload)
    if problems:
        raise Unhealthy("; ".join(problems))
    gaps = []
    for temperature in (1.0, 2.0):
        one = {
            "model": model,
            "messages": [{"role": "user", "content": "Reply with exactly: hello"}],
            "max_tokens": 1,
            "temperature": temperature,
            "logprobs": True,
            "top_logprobs": 5,
        }
        gaps.append(top_two_gap(_request(f"{base}/v1/chat/completions", one, timeout)))
    mode = logprobs_mode(*gaps)
    if mode == "raw":
        raise Unhealthy(
            f"logprobs did not change between temperature 1.0 and 2.0 (raw, pre-temperature): start vLLM with "
            f"{FLAG_PROCESSED}"
        )
    n_ids = len(payload["choices"][0]["token_ids"])
    return (
        f"engine healthy: {model} returned {len(payload['prompt_token_ids'])} prompt ids, {n_ids} sampled ids "
        f"with aligned token_id logprobs; logprobs mode {mode}"
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    host = os.environ.get("ENGINE_HOST") or "127.0.0.1"
    base = argv[0] if argv else f"http://{host}:{os.environ.get('ENGINE_PORT') or '8001'}"
    try:
        print(probe(base))
        return 0
    except Unhealthy as exc:
        print(f"engine UNHEALTHY: {exc}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
