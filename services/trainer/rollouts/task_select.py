"""Which of the env server's tasks the trainer trains on.

The env server serves the training datasets (DATASETS) and the held-out ones (EVAL_DATASETS) from one
process, so the sandbox templates are shared; the trainer must then pick: only rows of the DATASETS
splits, never an eval-only split (training on the held-out tasks would make every later evaluation a
measure of memory). SCREENED_TASKS, when set, narrows that to the tasks screening kept (trainer/evaluation/screen.py).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from .factory import task_ref_from_prompt


class TaskSelectionError(ValueError):
    """One line that says why no training task is left and what to change."""


def training_rows(rows: Sequence[dict], datasets: Sequence[str] = (), screened_tasks: str = "") -> list[dict]:
    picked = [r for r in rows if not datasets or task_ref_from_prompt(r["prompt"]).split in datasets]
    if not picked:
        served = sorted({task_ref_from_prompt(r["prompt"]).split for r in rows})
        raise TaskSelectionError(
            f"none of the env server's splits {served} is in DATASETS={','.join(datasets)}: the trainer trains on "
            "DATASETS only; set the same DATASETS for env-server and trainer"
        )
    if not screened_tasks:
        return picked
    path = Path(screened_tasks)
    try:
        keep = json.loads(path.read_text())["keep"]
        # The task id too: a dataset that changed since screening shifts indices, and must not silently
        # train on the wrong tasks.
        wanted = {(str(k["split"]), int(k["index"]), str(k.get("task_id") or "")) for k in keep}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise TaskSelectionError(
            f"SCREENED_TASKS={screened_tasks} is not a screening result ({type(exc).__name__}: {exc}): run "
            "scripts/screen, or leave SCREENED_TASKS empty to train on every task"
        ) from None
    kept = [r for r in picked if _key(r) in wanted]
    if not kept:
        raise TaskSelectionError(
            f"SCREENED_TASKS={screened_tasks} keeps {len(wanted)} task(s), none of them among the training tasks "
            "served now (another dataset, or an empty screening): re-run scripts/screen on DATASETS"
        )
    return kept


def _key(row: dict) -> tuple[str, int, str]:
    ref = task_ref_from_prompt(row["prompt"])
    return ref.split, ref.index, str(row.get("task_id") or "")
