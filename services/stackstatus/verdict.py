"""The one line `scripts/status` ends with: where the night's time goes, with the figures behind it.

A step's wall time (`perf/step_s`) splits into the part the trainer sat blocked on an empty rollout
queue (`perf/rollout_wait_s`, TRL's own measure) and the rest, its own compute and weight sync:

- wait under half the step: TRAINER-BOUND (more rollouts in flight would only queue);
- wait over half and the engine queues requests (`vllm:num_requests_waiting` > 0) or its KV cache is
  nearly full: ENGINE-BOUND (the engine is the queue the rollouts stand in);
- wait over half and the engine has no queue: SANDBOX-BOUND (rollouts spend their time in sandboxes and
  agents, not in generation: sandbox start-up, tool runs, verifiers).

Checked first, what stops the time going anywhere: a URL the env server no longer trusts (every rollout
refused), a trainer that is not training, a tunnel with no edge connection.
"""

from __future__ import annotations

from .figures import describe_engine

KV_FULL = 0.9
WAIT_SHARE = 0.5


def verdict(
    training: dict,
    engine: dict,
    trust: tuple[bool, str],
    edge_connections: float | None,
    inflight,
    trainer: str | None = None,
) -> str:
    """`trainer` is the trainer container's Docker state (None: no container), for the time before the run
    writes its status file."""
    trusted, why = trust
    eng = describe_engine(engine)
    if not trusted:
        return f"verdict: ROLLOUTS REFUSED: the capture URL is not trusted ({why}); {eng}"
    if edge_connections is not None and edge_connections < 1:
        return f"verdict: TUNNEL DOWN: 0 registered edge connections, sandboxes cannot reach the proxy; {eng}"
    state = training.get("state")
    if state == "waiting-for-rollouts":
        return f"verdict: ROLLOUTS REFUSED: the trainer waits for rollouts ({training.get('reason') or 'no reason'}); {eng}"
    if state in ("failed", "stopped-by-rule", "stopped"):
        why = (training.get("stop_rule") or {}).get("message") or training.get("error") or training.get("reason") or ""
        return f"verdict: trainer {state} at step {training.get('step')}" + (f": {why}" if why else "") + f"; {eng}"
    bound = _where(training, engine, eng, inflight)
    if state == "finished":
        return f"verdict: trainer finished at step {training.get('step')}; its last step was " + (
            bound or f"not timed; {eng}"
        )
    if bound:
        return "verdict: " + bound
    if training.get("step"):
        # TRL 1.16.0 times a step from the end of the one before (AsyncGRPOTrainer._log_step_metrics): the
        # first step done has no perf/step_s; step 2 is the first timed.
        return (
            f"verdict: step {training['step']}/{training.get('max_steps', '?')} done, not timed yet (a step is timed"
            f" from the end of the one before); {eng}; {inflight} sandboxes in flight"
        )
    if not state:
        state = "starting (no status file yet)" if trainer == "running" else "not started"
    return f"verdict: no step timed yet: trainer {state}; {eng}; {inflight} sandboxes in flight"


def _where(training: dict, engine: dict, eng: str, inflight) -> str | None:
    step_s, wait_s = training.get("step_s"), training.get("rollout_wait_s")
    if not step_s or wait_s is None:
        return None
    share = min(1.0, wait_s / step_s)
    split = f"the trainer waited {wait_s:.0f} s of its {step_s:.0f} s step for rollouts ({100 * share:.0f}%)"
    if share < WAIT_SHARE:
        return f"TRAINER-BOUND: {split}; the rest is its own step; {eng}"
    waiting, kv = engine.get("waiting") or 0, engine.get("kv_cache_usage") or 0
    if waiting > 0 or kv >= KV_FULL:
        return f"ENGINE-BOUND: {split}; the engine queues: {eng}"
    return f"SANDBOX-BOUND: {split} while the engine has no queue ({eng}); {inflight} sandboxes in flight"
