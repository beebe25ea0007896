"""The run's learning curve: one row per logged optimizer step, kept in `<run_dir>/curve.csv` and drawn in
`<run_dir>/curve.png` (trainer/report/curve_png.py), both rewritten atomically after every logged step.

    python -m trainer.report.curve <run_dir>      prints it as a table (the learning gate test prints the same)

A row holds the step's training reward mean and std (`harbor/*`), the pass@1 of the periodic evaluation that
ran at that step with its CI (`eval/pass@1*`, trainer/evaluation/eval_callback.py), and the engine-vs-trainer logprob
mismatch (`mismatch/kl_mean`, `mismatch/logprob_absdiff_max`; TRL's `kl` stands in for the mean where the
mismatch keys are absent: with AsyncGRPO's old logprobs being the engine's, it is the same gap plus staleness).
The baseline evaluation (EVAL_BASELINE, status.json's `eval_baseline`) is step 0's pass@1.

On resume the rows are rebuilt from the checkpoint's `trainer_state.json` log_history, never from the old
curve.csv: steps logged after that checkpoint are trained again and logged again, so the old file's tail
would be duplicates of steps about to be redone. The Trainer copies each log into log_history BEFORE its
`on_log` callbacks run (transformers 5.17.0 `Trainer.log`), so keys a callback adds (the evaluation's, the served
weights' check's) would be missing there; `keep_in_history` copies them into that entry, which the checkpoint then
saves.

Stdlib only: the host unit suite tests it, and the CLI runs wherever the run folder is readable.
"""

from __future__ import annotations

import csv
import io
import math
import sys
from pathlib import Path

from stack import atomic

from ..watch import summary_log
from . import curve_png

# curve.csv column -> the metric key it is read from, in the CSV's column order after `step`.
COLUMNS = {
    "reward_mean": "harbor/reward_mean",
    "reward_std": "harbor/reward_std",
    "pass_at_1": "eval/pass@1",
    "pass_at_1_ci_low": "eval/pass@1_ci_low",
    "pass_at_1_ci_high": "eval/pass@1_ci_high",
    "mismatch_kl_mean": "mismatch/kl_mean",
    "mismatch_logprob_absdiff_max": "mismatch/logprob_absdiff_max",
}
FALLBACK = {"mismatch_kl_mean": "kl"}  # TRL 1.16.0's approx KL against the sampling (engine) logprobs
CSV_NAME, PNG_NAME = "curve.csv", "curve.png"


def _num(value) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def row_fields(logs: dict) -> dict[str, float | None]:
    """The curve's figures one log carries, only those it carries (a window without scored groups logs no
    reward and must not blank one logged earlier for the same step); non-finite values as None."""
    out = {}
    for column, key in COLUMNS.items():
        if key in logs:
            out[column] = _num(logs[key])
        elif FALLBACK.get(column) in logs:
            out[column] = _num(logs[FALLBACK[column]])
    return out


def keep_in_history(history: list[dict], step: int, logs: dict) -> None:
    """Copy every figure a callback added to `logs` into log_history's entry for this step (see above): not only the
    curve's. The served-weights canary gap, the engine's version lag and the dropped-sample totals are added the same
    way, and without this they reached the console and the reporters but never trainer_state.json, so a run's saved
    history could not show them (the learning gate's check of the canary gap read an empty history)."""
    if history and history[-1].get("step") == step:
        for key, value in logs.items():
            if key not in history[-1]:
                history[-1][key] = value


class Curve:
    def __init__(self, run_dir: Path, last_step: int = 0):
        self.run_dir = Path(run_dir)
        self.last_step = last_step  # the x axis spans 0..max(last_step, last logged step)
        self.by_step: dict[int, dict[str, float | None]] = {}

    def restart(self, log_history: list[dict], baseline: dict | None) -> None:
        """Rows from a (resumed) Trainer's log_history, plus the baseline evaluation as step 0."""
        self.by_step = {}
        if baseline and _num(baseline.get("pass_at_1")) is not None:
            self.by_step[0] = {
                "pass_at_1": _num(baseline["pass_at_1"]),
                "pass_at_1_ci_low": _num(baseline.get("ci_low")),
                "pass_at_1_ci_high": _num(baseline.get("ci_high")),
            }
        for entry in log_history:
            if "step" in entry:
                self.log(int(entry["step"]), entry)

    def log(self, step: int, logs: dict) -> bool:
        """Merge one log into its step's row; False when it carried nothing for the curve, or is the Trainer's
        end-of-training summary."""
        if summary_log.is_summary(logs):  # figures of groups never trained on (trainer/watch/summary_log.py)
            return False
        fields = row_fields(logs)
        if not fields:
            return False
        self.by_step.setdefault(step, {}).update(fields)
        return True

    def rows(self) -> list[dict]:
        return [{"step": s, **{c: self.by_step[s].get(c) for c in COLUMNS}} for s in sorted(self.by_step)]

    def write(self) -> None:
        rows = self.rows()
        atomic.write_text(self.run_dir / CSV_NAME, to_csv(rows))
        atomic.write_bytes(self.run_dir / PNG_NAME, curve_png.render(rows, self.last_step))


def to_csv(rows: list[dict]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["step", *COLUMNS])
    for r in rows:
        writer.writerow([r["step"], *("" if r[c] is None else repr(r[c]) for c in COLUMNS)])
    return out.getvalue()


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as fh:
        return [
            {"step": int(r["step"]), **{c: float(r[c]) if r.get(c) else None for c in COLUMNS}}
            for r in csv.DictReader(fh)
        ]


def table(rows: list[dict]) -> str:
    def f(v, spec):
        return "-" if v is None else format(v, spec)

    lines = [f"{'step':>6} | {'reward mean ± std':>17} | {'pass@1 [CI]':<21} | mismatch kl / max|Δlogp|"]
    for r in rows:
        reward = "-" if r["reward_mean"] is None else f"{r['reward_mean']:.3f} ± {f(r['reward_std'], '.3f')}"
        passed = "-"
        if r["pass_at_1"] is not None:
            passed = f"{r['pass_at_1']:.3f} [{f(r['pass_at_1_ci_low'], '.3f')}, {f(r['pass_at_1_ci_high'], '.3f')}]"
        mismatch = "-"
        if r["mismatch_kl_mean"] is not None or r["mismatch_logprob_absdiff_max"] is not None:
            mismatch = f"{f(r['mismatch_kl_mean'], '.4g')} / {f(r['mismatch_logprob_absdiff_max'], '.3g')}"
        lines.append(f"{r['step']:>6} | {reward:>17} | {passed:<21} | {mismatch}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(
            "usage: python -m trainer.report.curve <run_dir>   (a folder under <bucket>/checkpoints/)", file=sys.stderr
        )
        return 2
    path = Path(argv[0]) / CSV_NAME
    if not path.is_file():
        print(f"trainer.report.curve: no {path} (the trainer writes it after every logged step)", file=sys.stderr)
        return 1
    print(table(read_csv(path)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
