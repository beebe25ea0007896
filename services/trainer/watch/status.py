"""Per-step console line and `<bucket>/checkpoints/<run>/status.json` (read by `scripts/status`).

status.json is small, rewritten atomically after every logged step and every checkpoint:

    {"run_name", "state": starting|warming-up|training|waiting-for-rollouts|stopped|stopped-by-rule|finished|
     failed, "reason" (why it waits or stopped), "step", "max_steps",
     "reward_mean", "reward_std", "zero_spread_frac", "unscorable_frac", "timeout_frac",
     "tool_calls_mean", "turns_mean", "samples_per_rollout", "forked_rollout_frac",
     "dropped_oversize_total", "fork_frac", "retry_frac", "mismatch_kl", "logprob_absdiff_max", "staleness_mean",
     "step_s", "rollout_wait_s", "last_checkpoint", "error",
     "updated_at", "started_at", "first_step_at" (unix times), "first_step_after_s" (first step's end minus the
     process start), "stop_rule" (trainer.watch.stop_rules, when one stopped the run)}

plus, when configured: "eval" (latest periodic evaluation), "eval_baseline", "eval_state" (trainer/evaluation/eval_callback.py)
and "hub" (the Hub push state, trainer/hub/publish.py).

`fork_frac` (TRL's share of turn transitions that forked) and `forked_rollout_frac` (rollouts with a forked
transition, trainer/rollouts/group_metrics.py) are the forking tell: a healthy multi-turn agent reads 0 on both.
`retry_frac` (multi-turn rollouts with a dropped-reply retry: the agent resent its conversation without a reply it
rejected, trainer/rollouts/retries.py) is kept out of both: it says how often the policy writes format errors, not a defect.
`mismatch_kl` (nats) and `logprob_absdiff_max` compare the engine's logprobs of the trained tokens with the
trainer's (trainer/watch/mismatch.py): near 0 when both hold the same weights; `staleness_mean` says how many optimizer
steps of policy drift they may also carry. `samples_per_rollout` against `turns_mean` is context only: TRL keeps
only rows holding a trained token, so a fully forked rollout can still come back as one row.

No transformers import here (trainer/watch/status_callback.py is the Trainer side), so the host unit suite checks
the key mapping and the file itself.
"""

from __future__ import annotations

import math
import os
import threading
import time
from pathlib import Path

from stack import atomic

from . import summary_log

# status.json field -> TRL/harbor metric key
METRICS = {
    "reward_mean": "harbor/reward_mean",
    "reward_std": "harbor/reward_std",
    "zero_spread_frac": "harbor/zero_spread_frac",
    "unscorable_frac": "harbor/unscorable_frac",
    "timeout_frac": "harbor/timeout_frac",
    "tool_calls_mean": "harbor/tool_calls_mean",
    "turns_mean": "rollout/turns_mean",
    "samples_per_rollout": "rollout/samples_per_rollout",
    "forked_rollout_frac": "harbor/forked_rollout_frac",
    # The run total (trainer.watch.dropped_samples.DroppedSampleCounter); TRL logs only per-window counts.
    "dropped_oversize_total": "batch/dropped_oversize_cumulative",
    "stale_frac": "sample/dropped_stale_frac",  # the STOP_STALE_FRAC rule's figure
    # TRL's share of turn transitions that forked: the forking stop rule's figure.
    "fork_frac": "rollout/fork_frac",
    # Multi-turn rollouts with a dropped-reply retry (trainer/rollouts/retries.py): forks by design, kept out of fork_frac.
    "retry_frac": "rollout/retry_frac",
    # Engine vs trainer logprobs of the trained tokens (trainer/watch/mismatch.py): the STOP_MISMATCH_KL rule's figure,
    # the worst token, and the staleness that tells policy drift from a defect.
    "mismatch_kl": "mismatch/kl_mean",
    "logprob_absdiff_max": "mismatch/logprob_absdiff_max",
    "staleness_mean": "sample/staleness_mean",
    # Where a step's time went: its wall time, and the part the trainer sat waiting for rollouts
    # (scripts/status reads the split: trainer-bound or rollout-bound).
    "step_s": "perf/step_s",
    "rollout_wait_s": "perf/rollout_wait_s",
}
# Run totals, not a step's figures: the end-of-training summary log carries them too, and they stay true there.
RUN_TOTALS = frozenset({"dropped_oversize_total"})


def _num(value):
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return None


def status_fields(logs: dict) -> dict:
    """The status.json fields one logged step sets: only the metrics present in `logs` (a window without
    multi-turn rollouts logs no fork figure, and must not blank the last one), non-finite values as None.
    The Trainer's end-of-training summary sets only the run totals: its other figures are of groups that finished
    after the last step and were never trained on (trainer/watch/summary_log.py), so the last step's stay."""
    names = RUN_TOTALS if summary_log.is_summary(logs) else METRICS.keys()
    return {name: _num(logs.get(METRICS[name])) for name in names if METRICS[name] in logs}


class RunStatus:
    def __init__(self, path: Path, run_name: str, max_steps: int):
        self.path = path
        self.doc = {
            "run_name": run_name,
            "state": "starting",
            "step": 0,
            "max_steps": max_steps,
            "last_checkpoint": None,
            "error": None,
            **{k: None for k in METRICS},
        }
        # The Hub publisher updates `hub` from its own thread (trainer/hub/publish.py).
        self._lock = threading.Lock()

    def update(self, **fields) -> None:
        with self._lock:
            self.doc.update(fields)
            self.doc["updated_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            atomic.write_json(self.path, self.doc, indent=1, sort_keys=True)


def process_started_at(stat_text: str | None = None, proc_stat_text: str | None = None, ticks: int = 0) -> float:
    """When this process started (unix time): field 22 of /proc/self/stat (clock ticks after boot) plus
    /proc/stat's `btime`. The first step's delay is measured from here, so it includes the imports and the
    model load, as an operator waiting for a first step lives it. Import time where /proc is unreadable."""
    try:
        stat_text = stat_text if stat_text is not None else Path("/proc/self/stat").read_text()
        proc_stat_text = proc_stat_text if proc_stat_text is not None else Path("/proc/stat").read_text()
        ticks = ticks or os.sysconf("SC_CLK_TCK")
        start_ticks = int(stat_text.rsplit(")", 1)[1].split()[19])
        boot = next(int(line.split()[1]) for line in proc_stat_text.splitlines() if line.startswith("btime "))
        return boot + start_ticks / ticks
    except (OSError, ValueError, IndexError, StopIteration):
        return _IMPORTED_AT


_IMPORTED_AT = time.time()


def first_step(started_at: float, now: float, step: int) -> tuple[dict, str]:
    """The status.json fields and the one log line for the end of the run's first training step."""
    after = max(0.0, now - started_at)
    fields = {"first_step_at": now, "first_step_after_s": round(after, 1)}
    return fields, f"trainer: first training step done {after:.0f} s after start (step {step})"


def console_line(doc: dict) -> str:
    def pct(key):
        return "-" if doc.get(key) is None else f"{100 * doc[key]:.0f}%"

    def num(key, fmt=".2f"):
        return "-" if doc.get(key) is None else format(doc[key], fmt)

    return (
        f"step {doc['step']}/{doc['max_steps']}  reward {num('reward_mean', '.3f')}±{num('reward_std', '.3f')}  "
        f"zero-spread {pct('zero_spread_frac')}  turns {num('turns_mean', '.1f')}  "
        f"samples/rollout {num('samples_per_rollout')} (forked {pct('forked_rollout_frac')})  "
        f"tools {num('tool_calls_mean', '.1f')}  timeouts {pct('timeout_frac')}  unscorable {pct('unscorable_frac')}  "
        f"mismatch kl {num('mismatch_kl', '.2g')} max|dlogp| {num('logprob_absdiff_max', '.2g')}  "
        f"ckpt {doc.get('last_checkpoint') or '-'}"
    )
