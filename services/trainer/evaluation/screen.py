"""Task screening: keep the tasks the base model solves sometimes, which are the only ones GRPO learns from.

GRPO learns from differences inside a group. A task the model always fails (or always solves) gives a
group with zero spread, zero advantage and no gradient, and still costs a group of rollouts every
time it is drawn (reward.py, "the all-or-nothing caveat"). Screening runs K attempts per task with the
base model at the TRAINING temperature (the policy the groups will be sampled from, sent as OpenEnv's
eval sampling so the attempts are never trained on) and keeps a task when its pass rate is strictly
between 0 and 1. A task whose attempts were all unscorable is dropped too: nothing is known about it.

    scripts/screen  =  docker compose run --rm trainer python -m trainer.evaluation.screen [--attempts K]

writes `<bucket>/screening/screened-tasks.json` (the list; point SCREENED_TASKS at it) and `screening.md`
(the per-task table). The trainer then trains on the kept tasks only (trainer/rollouts/task_select.py).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from stack import atomic
from stack import datasets as task_check

from ..rollouts.factory import task_ref_from_prompt
from .evaluate import per_task_table, run_attempts, select_tasks, task_table

DEFAULT_ATTEMPTS = 8


def verdict(row: dict) -> str:
    if not row["scored"]:
        return "drop: unscorable"
    if row["passed"] == 0:
        return "drop: never solved"
    if row["passed"] == row["scored"]:
        return "drop: always solved"
    return "keep"


def screen(attempts: Sequence[Any], **meta: Any) -> dict:
    table = per_task_table(attempts)
    for row in table:
        row["verdict"] = verdict(row)
    keep = [
        {"split": r["split"], "index": r["index"], "task_id": r["task_id"]} for r in table if r["verdict"] == "keep"
    ]
    return {**meta, "kept": len(keep), "screened": len(table), "keep": keep, "per_task": table}


def markdown(doc: dict) -> str:
    rows = task_table(doc).splitlines()
    rows[0] += " verdict |"
    rows[1] += "---|"
    for i, r in enumerate(doc["per_task"], start=2):
        rows[i] += f" {r['verdict']} |"
    return (
        f"# Task screening: {doc['kept']} of {doc['screened']} tasks kept\n\n"
        f"Model `{doc.get('model', '?')}`, {doc.get('attempts_per_task')} attempts per task at temperature "
        f"{doc.get('sampling', {}).get('temperature')}; kept when 0 < pass rate < 1.\n\n" + "\n".join(rows) + "\n"
    )


def dataset_problems(specs: Sequence[str]) -> list[str]:
    """The dataset check env-server starts with (stack/datasets.py), on the dataset folders visible here: a task
    env-server would refuse is not screened either (one line each)."""
    from openenv.harbor.tasks import resolve_task_dirs

    return task_check.preflight_problems(os.environ, specs, resolve_task_dirs)


def main(argv: Sequence[str] | None = None, runner: Any = None) -> int:
    """`runner`: the env server's (default), or a test's stand-in for it."""
    parser = argparse.ArgumentParser(
        prog="python -m trainer.evaluation.screen",
        description="K attempts per task with the base model; keep tasks with 0 < pass rate < 1 "
        "(writes <bucket>/screening/screened-tasks.json for SCREENED_TASKS)",
    )
    parser.add_argument("--split", action="append", default=[], help="split to screen (default: DATASETS)")
    parser.add_argument("--attempts", type=int, default=DEFAULT_ATTEMPTS, help=f"K (default {DEFAULT_ATTEMPTS})")
    parser.add_argument("--out", default="", help="folder (default <bucket>/screening)")
    args = parser.parse_args(argv)
    if args.attempts < 2:
        print("screen: --attempts must be at least 2 (one attempt cannot show a pass rate strictly between 0 and 1)")
        return 2

    from stack.readers.trainer import from_env

    from ..rollouts.factory import runner_from_settings

    s = from_env()
    out = Path(args.out or Path(s.bucket_dir) / "screening")
    if out.exists() and not out.is_dir():
        print(f"screen: --out {out} is a file, not a folder: choose another folder or move that file", file=sys.stderr)
        return 2
    if bad := dataset_problems(args.split or list(s.datasets)):
        for line in bad:
            print(f"screen: {line}", file=sys.stderr)
        return 2
    runner = runner or runner_from_settings(s)
    rows = runner.task_rows()
    splits = args.split or list(s.datasets) or sorted({task_ref_from_prompt(r["prompt"]).split for r in rows})
    sampling = {"temperature": s.temperature, "top_p": 1.0}
    started = time.time()
    try:
        tasks = select_tasks(rows, splits)
    except ValueError as exc:
        print(f"screen: {exc}", file=sys.stderr)
        return 2
    attempts = run_attempts(runner, tasks, args.attempts, sampling, s.evaluation.concurrency, s.reward_key)
    doc = screen(
        attempts,
        model=s.model,
        splits=splits,
        attempts_per_task=args.attempts,
        sampling=sampling,
        finished_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        wall_s=round(time.time() - started, 1),
        attempt_log=[asdict(a) for a in attempts],
    )
    atomic.write_json(out / "screened-tasks.json", doc, indent=1, sort_keys=True)
    atomic.write_text(out / "screening.md", markdown(doc))
    print(markdown(doc))
    print(f"screen: wrote {out / 'screened-tasks.json'}; train on it with SCREENED_TASKS={out / 'screened-tasks.json'}")
    if not doc["kept"]:
        print(
            "screen: no task kept: every task was always or never solved. Pick tasks nearer the model's level, "
            "or a different model; training on these teaches nothing",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
