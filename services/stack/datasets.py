"""One check of a dataset's task folders, shared by env-server (every task it would serve), preflight and
`trainer.evaluation.screen` (the local dataset folders they can see): a task is served only when Harbor can run and
score it, and only its own files reach a sandbox.

A task passes when: its folder and every link in it stay inside the dataset (a link to /etc would be
uploaded into the sandbox, and the Task API would read it), `task.toml` parses, its timeouts are positive
numbers, `tests/test.sh` (the verifier Harbor runs) is there, and `instruction.md` is there and within
TASK_INSTRUCTION_MAX_CHARS (the agent gets all of it, and the Task API shows the same text: env-server's
provider previews up to that size, env_server/task_env.py).

Which folders are tasks is OpenEnv's discovery (`openenv.harbor.tasks.resolve_task_dirs`): the caller hands
them in. Standard library only (tomllib), like the rest of `stack`.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

# What the verifier and the instruction are called in a Harbor task folder (harbor's TaskPaths).
VERIFIER = "tests/test.sh"
INSTRUCTION = "instruction.md"
# task.toml timeouts Harbor reads; each, when given, must be a positive number of seconds.
TIMEOUTS = (("agent", "timeout_sec"), ("verifier", "timeout_sec"), ("environment", "build_timeout_sec"))
SKIP_HINT = "(or set DATASET_BAD_TASKS=skip to serve the others)"


@dataclass
class Checked:
    """A dataset's task folders, split into those that pass and one line for each that does not."""

    spec: str
    good: list[Path] = field(default_factory=list)
    bad: list[str] = field(default_factory=list)


def _inside(path: Path, root: Path) -> bool:
    return path == root or path.is_relative_to(root)


def _escape(task_dir: Path, root: Path) -> str | None:
    """The first link (the task folder itself included) that resolves outside `root`, as a relative name."""
    if not _inside(task_dir.resolve(), root):
        return f"the task folder is a link to {task_dir.resolve()}"
    for folder, dirs, files in os.walk(task_dir):  # followlinks=False: a linked folder is checked, not entered
        for name in sorted(dirs + files):
            path = Path(folder) / name
            if path.is_symlink() and not _inside(path.resolve(), root):
                return f"{path.relative_to(task_dir)} is a link to {path.resolve()}"
    return None


def _timeouts(config: dict) -> str | None:
    for section, key in TIMEOUTS:
        table = config.get(section, {})
        if not isinstance(table, dict):
            return f"[{section}] in task.toml is not a table"
        if key not in table:
            continue
        value = table[key]
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            return f"[{section}] {key} = {value!r} in task.toml is not a positive number of seconds"
    return None


def task_problem(task_dir: Path, root: Path, max_chars: int) -> str | None:
    """What makes `task_dir` unservable (what is wrong: the fix, in a few words), or None."""
    if escape := _escape(task_dir, root):
        return f"{escape}, outside the dataset: replace the link with the file itself"
    config_path = task_dir / "task.toml"
    if not config_path.is_file():
        return "task.toml is missing: add the task's task.toml, or remove the folder"
    try:
        config = tomllib.loads(config_path.read_text(errors="replace"))
    except tomllib.TOMLDecodeError as exc:
        return f"task.toml does not parse ({exc}): fix its TOML"
    if why := _timeouts(config):
        return f"{why}: give it a positive number of seconds, e.g. 600.0"
    if not (task_dir / VERIFIER).is_file():
        return f"{VERIFIER} is missing, so nothing can score it: add the task's verifier script at {VERIFIER}"
    instruction = task_dir / INSTRUCTION
    if not instruction.is_file():
        return f"{INSTRUCTION} is missing: add the task's instruction"
    chars = len(instruction.read_text(errors="replace").strip())
    if chars > max_chars:
        return (
            f"{INSTRUCTION} is {chars} characters, above TASK_INSTRUCTION_MAX_CHARS={max_chars} (the agent would get "
            "all of it on every turn): shorten it, or raise TASK_INSTRUCTION_MAX_CHARS"
        )
    return None


def dataset_root(spec: str, task_dir: Path) -> Path:
    """The folder a task's files must stay in: the dataset's own folder for a local one (a link to that folder
    itself followed: an operator may serve `~/datasets/current`), else the folder the task was found in."""
    path = Path(spec).expanduser()
    return path.resolve() if path.is_dir() else task_dir.parent.resolve()


def check(spec: str, task_dirs: Iterable[Path], max_chars: int) -> Checked:
    """Every task of one dataset: each that fails is one line naming the task, what is wrong and the fix."""
    out = Checked(spec)
    for task_dir in task_dirs:
        problem = task_problem(Path(task_dir), dataset_root(spec, Path(task_dir)), max_chars)
        if problem is None:
            out.good.append(Path(task_dir))
        else:
            out.bad.append(f"DATASETS {spec!r} task {Path(task_dir).name!r}: {problem} {SKIP_HINT}")
    return out


def is_local(spec: str) -> bool:
    """A dataset given as a folder (Hub ids and Harbor name@version are not)."""
    return spec.startswith(("/", ".", "~"))


def check_visible(specs: Iterable[str], max_chars: int, resolve: Callable[[str], list[Path]]) -> list[str]:
    """For preflight and `trainer.evaluation.screen`, which run where env-server's folders may not be mounted: the lines
    for the local dataset folders visible here (env-server checks every dataset again, and all of them)."""
    lines: list[str] = []
    for spec in specs:
        if not is_local(spec) or not Path(spec).expanduser().is_dir():
            continue
        try:
            dirs = resolve(spec)
        except Exception:  # noqa: BLE001 -- a folder OpenEnv finds no task in is env-server's own line
            continue
        lines += check(spec, dirs, max_chars).bad
    return lines


def preflight_problems(env: Mapping[str, str], specs: Iterable[str], resolve: Callable[[str], list[Path]]) -> list[str]:
    """`check_visible` with env-server's own settings (TASK_INSTRUCTION_MAX_CHARS, DATASET_BAD_TASKS) read from
    `env`: nothing under DATASET_BAD_TASKS=skip, where env-server serves the others and counts what it left out.
    A bad value of either setting is env-server-settings' line; its default is used here."""
    from . import fields
    from .env import Env

    read = Env(env, collect=True)
    if read.get(fields.DATASET_BAD_TASKS) == "skip":
        return []
    return check_visible(specs, read.get(fields.TASK_INSTRUCTION_MAX_CHARS), resolve)
