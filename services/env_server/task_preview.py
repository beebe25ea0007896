"""The Task API shows each task's instruction whole, as the agent gets it.

OpenEnv 0.10.0's `openenv.harbor.tasks.read_instruction` cuts the Task API's copy at 4000 characters (plus
"\\n…"), while Harbor hands the sandbox the whole file: a trainer's dataset row, a screening report and the
agent then disagree about the task. The dataset check (stack/datasets.py) already refuses an instruction
longer than TASK_INSTRUCTION_MAX_CHARS, so previewing up to that size shows every served instruction whole.
`HarborTaskProvider._ref` looks `read_instruction` up in its module at each call (read in 0.10.0), so
rebinding it there is enough.
"""

from __future__ import annotations


def install(max_chars: int) -> str:
    """Preview instructions up to `max_chars`; returns the startup report line."""
    from openenv.harbor import tasks

    original = getattr(tasks.read_instruction, "original", tasks.read_instruction)

    def read_instruction(task_dir, *, limit: int = max_chars, spec: str | None = None) -> str:
        return original(task_dir, limit=max(limit, max_chars), spec=spec)

    read_instruction.original = original  # type: ignore[attr-defined]
    tasks.read_instruction = read_instruction
    return f"task api  instructions shown whole, as the agent gets them (<= {max_chars} characters each)"
