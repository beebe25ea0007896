"""scripts/status's conclusions: Prometheus figures read by the exporters' names and the one verdict line,
over known inputs (exact lines). Whether the URL is trusted is stack.handoff.lookup's answer, tested with
the hand-off (tests/unit/stack, tests/unit/status/test_status_handoff.py)."""

from stackstatus import figures, prometheus
from stackstatus.verdict import verdict

# The shape vLLM 0.31.0 serves (two data-parallel engines, so figures sum over the `engine` label).
VLLM = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="Qwen/Qwen3-1.7B"} 3.0
vllm:num_requests_running{engine="1",model_name="Qwen/Qwen3-1.7B"} 2.0
vllm:num_requests_waiting{engine="0",model_name="Qwen/Qwen3-1.7B"} 4.0
vllm:num_requests_waiting{engine="1",model_name="Qwen/Qwen3-1.7B"} 0.0
vllm:kv_cache_usage_perc{engine="0",model_name="Qwen/Qwen3-1.7B"} 0.25
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="Qwen/Qwen3-1.7B"} 1000.0
vllm:generation_tokens_created{engine="0",model_name="Qwen/Qwen3-1.7B"} 1.79e+09
vllm:e2e_request_latency_seconds_bucket{le="+Inf",engine="0",model_name="Qwen/Qwen3-1.7B"} 7.0
not a sample line
"""
LATER = VLLM.replace("} 1000.0", "} 1250.0")
NOW = 1_800_000_000.0
TRUSTED = (True, "")
ENGINE = {"running": 5.0, "waiting": 0.0, "kv_cache_usage": 0.25, "generation_tok_s": 250.0}


def test_engine_figures_by_vllms_names_summed_over_engines_with_throughput_from_the_counter():
    f = figures.engine(prometheus.parse(VLLM), prometheus.parse(LATER), 1.0)
    assert f == {
        "running": 5.0,
        "waiting": 4.0,
        "kv_cache_usage": 0.25,
        "generation_tokens_total": 1250.0,
        "generation_tok_s": 250.0,
        "interval_s": 1.0,
    }
    assert figures.describe_engine(f) == "engine 5 running, 4 waiting, KV cache 25%, 250.0 tok/s generated"


def test_cloudflareds_edge_connection_gauge():
    assert prometheus.parse("cloudflared_tunnel_ha_connections 4\n")[figures.EDGE_CONNECTIONS] == 4.0


def test_an_unreachable_exporter_is_one_line_not_a_crash():
    out = prometheus.scrape("http://127.0.0.1:9/metrics", timeout=2)
    assert isinstance(out, str) and out.startswith("http://127.0.0.1:9/metrics not readable (")


def test_verdict_trainer_bound():
    line = verdict({"state": "training", "step_s": 100.0, "rollout_wait_s": 10.0}, ENGINE, TRUSTED, 4, 8)
    assert line == (
        "verdict: TRAINER-BOUND: the trainer waited 10 s of its 100 s step for rollouts (10%); the rest is its own "
        "step; engine 5 running, 0 waiting, KV cache 25%, 250.0 tok/s generated"
    )


def test_verdict_engine_bound_when_the_engine_queues():
    line = verdict(
        {"state": "training", "step_s": 100.0, "rollout_wait_s": 80.0}, {**ENGINE, "waiting": 3.0}, TRUSTED, 4, 8
    )
    assert line.startswith("verdict: ENGINE-BOUND: the trainer waited 80 s of its 100 s step for rollouts (80%)")
    assert line.endswith("engine 5 running, 3 waiting, KV cache 25%, 250.0 tok/s generated")


def test_verdict_sandbox_bound_when_the_engine_has_no_queue():
    line = verdict({"state": "training", "step_s": 100.0, "rollout_wait_s": 80.0}, ENGINE, TRUSTED, 4, 8)
    assert line == (
        "verdict: SANDBOX-BOUND: the trainer waited 80 s of its 100 s step for rollouts (80%) while the engine has "
        "no queue (engine 5 running, 0 waiting, KV cache 25%, 250.0 tok/s generated); 8 sandboxes in flight"
    )


def test_verdict_names_what_stops_the_time_going_anywhere_first():
    refused = verdict({"state": "training"}, ENGINE, (False, "withdrawn by tunnel-check: HTTP 530"), 4, 0)
    assert refused.startswith(
        "verdict: ROLLOUTS REFUSED: the capture URL is not trusted (withdrawn by tunnel-check: HTTP 530); engine 5"
    )
    assert verdict({"state": "training"}, ENGINE, TRUSTED, 0, 0).startswith("verdict: TUNNEL DOWN: 0 registered")
    stopped = {"state": "stopped-by-rule", "step": 5, "stop_rule": {"message": "trainer: STOPPED by rule X"}}
    assert verdict(stopped, {}, TRUSTED, None, 0) == (
        "verdict: trainer stopped-by-rule at step 5: trainer: STOPPED by rule X; engine metrics unavailable"
    )
    waiting = {"state": "waiting-for-rollouts", "reason": "env server unreachable"}
    assert verdict(waiting, ENGINE, TRUSTED, 4, 0).startswith(
        "verdict: ROLLOUTS REFUSED: the trainer waits for rollouts (env server unreachable); engine 5 running"
    )
    finished = {"state": "finished", "step": 2, "step_s": 60.0, "rollout_wait_s": 50.0}
    assert verdict(finished, ENGINE, TRUSTED, 1, 0).startswith(
        "verdict: trainer finished at step 2; its last step was SANDBOX-BOUND: the trainer waited 50 s of its 60 s"
    )
    assert verdict({"state": "warming-up"}, ENGINE, TRUSTED, None, 1) == (
        "verdict: no step timed yet: trainer warming-up; engine 5 running, 0 waiting, KV cache 25%, "
        "250.0 tok/s generated; 1 sandboxes in flight"
    )


def test_forking_label_reads_the_fractions_the_trainer_logs_not_rows_per_rollout():
    # One row per rollout, yet every transition forked: TRL kept only the rows with a trained token.
    forked = {"samples_per_rollout": 1.0, "turns_mean": 3.0, "fork_frac": 1.0, "forked_rollout_frac": 1.0}
    assert figures.forking(forked) == (
        "forked 100% of turn transitions, 100% of rollouts"
        "  (FORKING: re-rendered prompts; stop rule STOP_FORKING_FRAC reads the transitions)"
    )
    assert figures.forking({"fork_frac": 0.0, "forked_rollout_frac": 0.0, "samples_per_rollout": 1.0}) == (
        "forked 0% of turn transitions, 0% of rollouts"
    )
    # No multi-turn rollout logged yet: unknown, not a verdict.
    assert figures.forking({"forked_rollout_frac": 0.0}) == "forked ? of turn transitions, 0% of rollouts"
