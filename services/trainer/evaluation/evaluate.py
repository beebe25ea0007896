"""Evaluation: N attempts per held-out task through the env server, at eval sampling; pass@k with a CI.

The same path as training (env server -> sandbox -> agent -> capture proxy -> engine), with OpenEnv's eval
purpose (`EnvServerRunner.evaluate`), so the number measures the agent the trainer trains, not a
re-implementation of it. Used three ways:

- standalone, before any training (the baseline every run should have) or at any time against whatever
  the engine serves:  `scripts/evaluate` = `docker compose run --rm trainer python -m trainer.evaluation.evaluate`,
  writing `<bucket>/evals/<name>/eval.json` and `eval.md`;
- periodically during training (trainer/evaluation/eval_callback.py, EVAL_STEPS) with the engine's live weights;
- by screening (trainer/evaluation/screen.py), which reuses the attempts and the per-task table.

The engine is the thing evaluated: the base model when nothing has trained it yet, the live weights
during a run. To evaluate a saved checkpoint, serve it (the engine mounts the bucket:
MODEL=/bucket/checkpoints/<run>/checkpoint-N) and run this with `--label`.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from stack import atomic, names

from ..rollouts.factory import TaskRef, task_ref_from_prompt
from ..rollouts.reward import CORRECT_AT, base_reward
from ..watch.engine_gone import EngineGone
from .passk import suite_pass_at_k


@dataclass(frozen=True)
class Attempt:
    split: str
    index: int
    task_id: str
    attempt: int
    reward: float | None  # None: unscorable (sandbox/verifier failed), never counted as a failure
    error: str = ""
    turns: int = 0
    wall_s: float = 0.0

    @property
    def passed(self) -> bool:
        return self.reward is not None and self.reward >= CORRECT_AT


def resolve_splits(rows: Sequence[dict], splits: Sequence[str]) -> list[str]:
    """`splits` as the env server names them. The server names a local split by its path in its container
    (`/app/datasets/starter`); a split may also be asked for by its folder name (`starter`) when exactly one
    served split has that name. Nothing matched, or a name two splits share: the error lists what is served."""
    if not splits:
        raise ValueError(
            "no evaluation split: set EVAL_DATASETS (a dataset the env server serves; keep it out of DATASETS so "
            "it is held out) or pass --split; in the CPU form, `--cpu --learn` serves a held-out split "
            "(datasets/pick-answer/heldout) and evaluates it by default"
        )
    served = sorted({task_ref_from_prompt(r["prompt"]).split for r in rows})
    resolved, unknown = [], []
    for split in splits:
        named = [s for s in served if Path(s).name == split.rstrip("/")]
        if split in served:
            resolved.append(split)
        elif len(named) == 1:
            resolved.append(named[0])
        else:
            unknown.append(split)
    if unknown:
        shared = [u for u in unknown if sum(Path(s).name == u.rstrip("/") for s in served) > 1]
        raise ValueError(
            f"evaluation split(s) {unknown} are not served by the env server (it serves {served}): add them to "
            "EVAL_DATASETS, which the env server also serves, and restart env-server"
            + (f"; {shared} name more than one served split: give the full name" if shared else "")
        )
    return resolved


def select_tasks(rows: Sequence[dict], splits: Sequence[str], max_tasks: int = 0) -> list[tuple[TaskRef, str]]:
    """The tasks of `splits` (env server split names, or unambiguous folder names: resolve_splits), in the
    server's order, at most `max_tasks`."""
    splits = resolve_splits(rows, splits)
    picked = []
    for row in rows:
        ref = task_ref_from_prompt(row["prompt"])
        if ref.split in splits:
            picked.append((ref, str(row.get("task_id") or f"{ref.split}#{ref.index}")))
    return picked[:max_tasks] if max_tasks > 0 else picked


def run_attempts(
    runner: Any,
    tasks: Sequence[tuple[TaskRef, str]],
    attempts: int,
    eval_sampling: dict,
    concurrency: int,
    reward_key: str = "",
) -> list[Attempt]:
    """Every task `attempts` times, `concurrency` at a time. A failed attempt costs that attempt only."""

    def one(job: tuple[TaskRef, str, int]) -> Attempt:
        ref, task_id, n = job
        t0 = time.monotonic()
        try:
            result = runner.evaluate(ref, eval_sampling)
            reward = base_reward(result.reward, result.rewards, reward_key)
            error = "" if reward is not None else f"{result.exception_type or 'no reward'}: {result.error or ''}"
            return Attempt(
                ref.split, ref.index, task_id, n, reward, error.strip()[:300], result.n_turns, time.monotonic() - t0
            )
        except EngineGone:
            raise  # not this attempt's fault: the run stops (trainer/watch/engine_gone.py)
        except Exception as exc:  # noqa: BLE001 - one broken rollout is one unscorable attempt
            return Attempt(
                ref.split, ref.index, task_id, n, None, f"{type(exc).__name__}: {exc}"[:300], 0, time.monotonic() - t0
            )

    jobs = [(ref, task_id, n) for n in range(attempts) for ref, task_id in tasks]
    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        return list(pool.map(one, jobs))


def per_task_table(attempts: Sequence[Attempt]) -> list[dict]:
    table: dict[tuple[str, int], dict] = {}
    for a in attempts:
        row = table.setdefault(
            (a.split, a.index),
            {"split": a.split, "index": a.index, "task_id": a.task_id, "scored": 0, "passed": 0, "unscorable": 0},
        )
        row.setdefault("_rewards", [])
        if a.reward is None:
            row["unscorable"] += 1
            row.setdefault("errors", []).append(a.error)
        else:
            row["scored"] += 1
            row["passed"] += int(a.passed)
            row["_rewards"].append(a.reward)
    rows = []
    for row in table.values():
        rewards = row.pop("_rewards")
        row["pass_rate"] = row["passed"] / row["scored"] if row["scored"] else None
        row["reward_mean"] = sum(rewards) / len(rewards) if rewards else None
        rows.append(row)
    return rows


def summarize(attempts: Sequence[Attempt], pass_k: Sequence[int], **meta: Any) -> dict:
    """The evaluation document: pass@k with intervals, counts, and the per-task table."""
    table = per_task_table(attempts)
    scored = [a for a in attempts if a.reward is not None]
    return {
        **meta,
        "tasks": len(table),
        "attempts": len(attempts),
        "scored_attempts": len(scored),
        "unscorable": len(attempts) - len(scored),
        "reward_mean": sum(a.reward for a in scored) / len(scored) if scored else None,
        "pass_at_k": {str(k): suite_pass_at_k([(r["scored"], r["passed"]) for r in table], k) for k in pass_k},
        "per_task": table,
    }


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def headline(doc: dict, k: int = 1) -> str:
    """`37.5% [21.1%, 57.3%] wilson-95`: pass@k with its interval, for tables and status lines."""
    p = (doc.get("pass_at_k") or {}).get(str(k)) or {}
    if p.get("value") is None:
        return "-"
    return f"{_pct(p['value'])} [{_pct(p['ci_low'])}, {_pct(p['ci_high'])}]"


def comparison_table(docs: Sequence[dict]) -> str:
    """The before/after table: one row per evaluation (baseline, periodic steps, final)."""
    ks = sorted({int(k) for d in docs for k in (d.get("pass_at_k") or {})}) or [1]
    head = "| weights | split | tasks | scored / attempts | " + " | ".join(f"pass@{k} (95% CI)" for k in ks) + " |"
    lines = [head, "|" + "---|" * (4 + len(ks))]
    for d in docs:
        cells = [
            str(d.get("label", "?")),
            ", ".join(Path(s).name or s for s in d.get("splits", []))
            + ("" if d.get("held_out", True) else " (trained on)"),
            str(d.get("tasks", 0)),
            f"{d.get('scored_attempts', 0)} / {d.get('attempts', 0)}",
            *(headline(d, k) for k in ks),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    methods = sorted({p["method"] for d in docs for p in (d.get("pass_at_k") or {}).values() if p.get("method")})
    if methods:
        lines.append("")
        lines.append(
            f"Intervals: {', '.join(methods)} (pass@1: Wilson score over scored attempts; pass@k>1: bootstrap "
            "over tasks). Unscorable attempts (sandbox/verifier failures) are excluded, not counted as failures."
        )
    return "\n".join(lines)


def task_table(doc: dict) -> str:
    lines = ["| task | split | passed / scored | pass rate | unscorable |", "|---|---|---|---|---|"]
    for r in doc.get("per_task", []):
        lines.append(
            f"| {r['task_id']} | {Path(r['split']).name or r['split']} | {r['passed']} / {r['scored']} | "
            f"{_pct(r['pass_rate'])} | {r['unscorable']} |"
        )
    return "\n".join(lines)


def markdown(doc: dict) -> str:
    sampling = ", ".join(f"{k}={v}" for k, v in (doc.get("sampling") or {}).items())
    return (
        f"# Evaluation: {doc.get('label', '?')}\n\n"
        f"Model `{doc.get('model', '?')}`, {doc.get('attempts_per_task', 1)} attempt(s) per task at eval sampling "
        f"({sampling}), {doc.get('finished_at', '')}.\n\n"
        f"{comparison_table([doc])}\n\n## Per task\n\n{task_table(doc)}\n"
    )


def write_report(doc: dict, folder: Path, stem: str = "eval") -> Path:
    atomic.write_json(folder / f"{stem}.json", doc, indent=1, sort_keys=True)
    atomic.write_text(folder / f"{stem}.md", markdown(doc))
    return folder / f"{stem}.json"


def evaluate(runner: Any, rows: Sequence[dict], s: Any, *, label: str, splits: Sequence[str] = ()) -> dict:
    """Run the evaluation described by settings `s` (stack.readers.trainer.Settings) and return its document."""
    e = s.evaluation
    splits = resolve_splits(rows, list(splits or e.datasets))
    tasks = select_tasks(rows, splits, e.max_tasks)
    started = time.time()
    attempts = run_attempts(runner, tasks, e.attempts, e.sampling, e.concurrency, s.reward_key)
    return summarize(
        attempts,
        e.pass_k,
        label=label,
        model=s.model,
        splits=splits,
        held_out=not set(splits) & set(s.datasets),
        attempts_per_task=e.attempts,
        sampling=e.sampling,
        started_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        finished_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        wall_s=round(time.time() - started, 1),
        attempt_log=[asdict(a) for a in attempts],
    )


def main(argv: Sequence[str] | None = None, runner: Any = None) -> int:
    """`runner`: the env server's (default), or a test's stand-in for it."""
    parser = argparse.ArgumentParser(
        prog="python -m trainer.evaluation.evaluate",
        description="Evaluate what the engine serves on held-out tasks (pass@k with a 95% CI); "
        "writes <bucket>/evals/<name>/eval.json and eval.md",
    )
    parser.add_argument(
        "--split",
        action="append",
        default=[],
        help="split to evaluate, by the env server's name or its folder name, e.g. starter (default: EVAL_DATASETS)",
    )
    parser.add_argument("--name", default="baseline", help="folder under <bucket>/evals (default: baseline)")
    parser.add_argument("--label", default="", help="what is being evaluated, for the tables (default: base <MODEL>)")
    args = parser.parse_args(argv)

    from stack.readers.trainer import from_env

    from ..rollouts.factory import runner_from_settings

    try:
        s = from_env()
    except ValueError as exc:
        print(f"evaluate: {exc}", file=sys.stderr)
        return 2
    evals = Path(s.bucket_dir) / "evals"
    if why := names.problem("--name", args.name, evals):
        # The name is a folder under <bucket>/evals: '../x' or '/x' would write outside it, '' into evals/ itself.
        print(f"evaluate: {why}", file=sys.stderr)
        return 2
    runner = runner or runner_from_settings(s)
    try:
        doc = evaluate(runner, runner.task_rows(), s, label=args.label or f"base {s.model}", splits=args.split)
    except (ValueError, RuntimeError) as exc:
        print(f"evaluate: {exc}", file=sys.stderr)
        return 2
    path = write_report(doc, evals / args.name)
    print(comparison_table([doc]))
    print(f"\nevaluate: wrote {path} and {path.with_suffix('.md')}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
