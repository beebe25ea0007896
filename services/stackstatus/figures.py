"""The engine's and the tunnel's figures, by their exporters' own metric names.

vLLM 0.31.0 (`vllm/v1/metrics/loggers.py`): `vllm:num_requests_running`, `vllm:num_requests_waiting`,
`vllm:kv_cache_usage_perc` (a fraction, 0..1) and the counter `vllm:generation_tokens_total`, whose rate
over two scrapes is the generation throughput. The mock engine serves the same names.
cloudflared 2026.7.1 (`proxy/metrics.go`, namespace `cloudflared`, subsystem `tunnel`):
`cloudflared_tunnel_ha_connections`, the edge connections registered right now (0: the tunnel is not
connected, whatever its process says). The tunnel stand-in serves the same gauge.
"""

from __future__ import annotations

ENGINE = {
    "running": "vllm:num_requests_running",
    "waiting": "vllm:num_requests_waiting",
    "kv_cache_usage": "vllm:kv_cache_usage_perc",
    "generation_tokens_total": "vllm:generation_tokens_total",
}
EDGE_CONNECTIONS = "cloudflared_tunnel_ha_connections"


def engine(first: dict[str, float], second: dict[str, float], interval_s: float) -> dict:
    """Gauges from the second scrape; throughput from the counter's change between the two."""
    figures = {key: second.get(name) for key, name in ENGINE.items()}
    before, after = first.get(ENGINE["generation_tokens_total"]), second.get(ENGINE["generation_tokens_total"])
    figures["generation_tok_s"] = (
        round((after - before) / interval_s, 1) if before is not None and after is not None and interval_s > 0 else None
    )
    figures["interval_s"] = interval_s
    return figures


def describe_engine(f: dict) -> str:
    if f.get("running") is None:
        return "engine metrics unavailable"

    def n(key):
        return "?" if f.get(key) is None else f"{f[key]:.0f}"

    kv = "?" if f.get("kv_cache_usage") is None else f"{100 * f['kv_cache_usage']:.0f}%"
    if f.get("running") == 0 and f.get("waiting") == 0:
        # Nothing runs or waits: tokens counted between the two scrapes are the engine healthcheck's own probe
        # (engine.probe generates every interval), which read as "10.0 tok/s generated" after a run ended.
        return f"engine 0 running, 0 waiting, KV cache {kv}, idle"
    tok = "?" if f.get("generation_tok_s") is None else f"{f['generation_tok_s']:.1f}"
    return f"engine {n('running')} running, {n('waiting')} waiting, KV cache {kv}, {tok} tok/s generated"


def forking(training: dict) -> str:
    """The training line's forking figures and label, from the fractions the trainer logs (status.json):
    TRL's `fork_frac` (turn transitions that forked: what the STOP_FORKING_FRAC rule reads) and
    `forked_rollout_frac` (rollouts with a forked transition), and beside them `retry_frac` (the agent's dropped-reply
    retries, excluded from both). Rows per rollout is not the tell: TRL keeps
    only rows holding a trained token, so a fully forked rollout can come back as one row."""
    fork, rollouts = training.get("fork_frac"), training.get("forked_rollout_frac")

    def pct(x):
        return "?" if x is None else f"{100 * float(x):.0f}%"

    line = f"forked {pct(fork)} of turn transitions, {pct(rollouts)} of rollouts"
    if training.get("retry_frac") is not None:
        # The agent's format-error retries (trainer/rollouts/retries.py): forks by design, counted in neither figure above.
        line += f"; {pct(training['retry_frac'])} of multi-turn rollouts retried a rejected reply"
    if (fork or 0) > 0 or (rollouts or 0) > 0:
        line += "  (FORKING: re-rendered prompts; stop rule STOP_FORKING_FRAC reads the transitions)"
    return line


def stale(training: dict) -> str:
    """The share of samples TRL dropped as older than max_staleness in the last step (STOP_STALE_FRAC reads it)."""
    frac = training.get("stale_frac")
    return "dropped stale ?" if frac is None else f"dropped stale {100 * float(frac):.0f}%"


def mismatch(training: dict) -> str:
    """The engine-vs-trainer logprob mismatch of the last step (status.json, trainer/watch/mismatch.py): the mean KL that
    STOP_MISMATCH_KL reads, the worst token's gap, and the staleness that tells policy drift from a defect."""
    kl, worst, stale = (training.get(k) for k in ("mismatch_kl", "logprob_absdiff_max", "staleness_mean"))

    def g(x):
        return "?" if x is None else f"{float(x):.3g}"

    return f"mismatch KL {g(kl)} nats, max |logprob diff| {g(worst)} at staleness {g(stale)}"
