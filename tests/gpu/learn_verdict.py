"""The learning run's verdict and its table (stdlib + trainer.evaluation.passk: unit-tested on the CPU host).

The assertion, the same for the learning run and its control: held-out pass@1 after training has a 95% Wilson
interval wholly above the baseline's (trainer.evaluation.passk, the project's own interval, as the CPU learning gate and
`scripts/evaluate` compute it). The learning run must pass it; the control (pushes skipped) must fail it.
"""

from __future__ import annotations

import json
from pathlib import Path

from trainer.evaluation.passk import wilson_interval

REWARD_KEY = "harbor/reward_mean"
KL_KEY = "mismatch/kl_mean"  # trainer/watch/mismatch.py
PUSH_KEY = "perf/weight_sync_s"  # TRL 1.16.0's own timing of each sync


def pass_at_1(doc: dict) -> tuple[int, int, float, float, float]:
    """(passed, scored, value, low, high) of an evaluation document (trainer.evaluation.evaluate), the interval recomputed
    from the counts with trainer.evaluation.passk.wilson_interval so that a document cannot carry a friendlier one."""
    passed = sum(int(r["passed"]) for r in doc["per_task"])
    scored = sum(int(r["scored"]) for r in doc["per_task"])
    low, high = wilson_interval(passed, scored)
    return passed, scored, (passed / scored if scored else 0.0), low, high


def gate_failures(baseline: dict, final: dict, min_scored: int) -> list[str]:
    """Why the run did NOT show learning, one line each; empty when it did."""
    failures = []
    bp, bn, b, b_lo, b_hi = pass_at_1(baseline)
    fp, fn, f, f_lo, f_hi = pass_at_1(final)
    for name, n in (("baseline", bn), ("final", fn)):
        if n < min_scored:
            failures.append(f"the {name} evaluation scored {n} attempts, fewer than the {min_scored} planned")
    if not f_lo > b_hi:
        failures.append(
            f"held-out pass@1 {f:.3f} [{f_lo:.3f}, {f_hi:.3f}] ({fp}/{fn}) after training does not clear the baseline "
            f"{b:.3f} [{b_lo:.3f}, {b_hi:.3f}] ({bp}/{bn}) (95% Wilson intervals overlap)"
        )
    return failures


def per_step(history: list[dict], key: str) -> dict[int, float]:
    """{step: value} of `key` in a Trainer log history (the last checkpoint's trainer_state.json)."""
    return {int(h["step"]): float(h[key]) for h in history if isinstance(h.get(key), (int, float))}


def log_history(run_dir: Path) -> list[dict]:
    saved = sorted(Path(run_dir).glob("checkpoint-*/trainer_state.json"), key=lambda p: int(p.parent.name[11:]))
    return json.loads(saved[-1].read_text())["log_history"] if saved else []


def _interval(doc: dict) -> str:
    p, n, v, lo, hi = pass_at_1(doc)
    return f"{100 * v:.1f}% [{100 * lo:.1f}%, {100 * hi:.1f}%] ({p}/{n})"


def _series(values: dict[int, float], fmt: str) -> str:
    return " ".join(format(values[s], fmt) for s in sorted(values)) or "-"


def table(figures: dict, baseline: dict, final: dict, history: list[dict]) -> str:
    rows = [
        (
            "run",
            f"{figures.get('kind', '?')} ({figures.get('engine', '?')}, WEIGHT_TRANSFER={figures.get('weight_transfer')})",
        ),
        ("baseline held-out pass@1 (95% Wilson)", _interval(baseline)),
        ("final held-out pass@1 (95% Wilson)", _interval(final)),
        ("reward by step (harbor/reward_mean)", _series(per_step(history, REWARD_KEY), ".2f")),
        ("push seconds by step (perf/weight_sync_s)", _series(per_step(history, PUSH_KEY), ".3f")),
        ("mismatch KL by step (mismatch/kl_mean)", _series(per_step(history, KL_KEY), ".1e")),
        ("verdict", "; ".join(figures.get("failures") or []) or "learned: the intervals do not overlap"),
    ]
    rows += [(k, str(v)) for k, v in figures.get("timings_s", {}).items()]
    return "\n".join(["| figure | value |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows)])
