"""Which checkpoint an explicit RUN_NAME resumes from: the newest one that is complete and loads.

The newest folder is not always that: a save cut short by a kill leaves a `checkpoint-N` without its
`trainer_state.json` (the Trainer writes it last) or with a truncated one, and a full disk can leave weights
cut off mid-file. transformers then raised a JSONDecodeError (or a safetensors error) after the engine had
loaded. Here each such folder is named in one line and passed over for the next older one that loads; a run
whose every checkpoint is broken is refused in one line (starting it from step 0 would lose its position
without a word), never trained from scratch under its old name.

"Loads" is checked as far as it can be without torch: trainer_state.json parses and states its step, and
the weights the Trainer saves (transformers 5.x `save_pretrained`: model.safetensors, or shards listed in
model.safetensors.index.json) are there with a safetensors header that parses and data as long as it says.
"""

from __future__ import annotations

import json
import os
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path

from stack.env import EnvError

CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")
SINGLE, INDEX = "model.safetensors", "model.safetensors.index.json"
# Older or adapter-only saves load too (transformers' own fallbacks).
OTHER_WEIGHTS = ("pytorch_model.bin", "pytorch_model.bin.index.json", "adapter_model.safetensors")


def _safetensors_problem(path: Path) -> str | None:
    """Why `path` is not a whole safetensors file: an 8-byte header length, a JSON header, and the data it
    describes (the largest end offset) all present."""
    try:
        size = path.stat().st_size
        with path.open("rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            if n > size - 8:
                return f"{path.name} is cut off ({size} bytes, its header alone needs {n + 8})"
            header = json.loads(fh.read(n))
    except (OSError, struct.error, ValueError) as exc:
        return f"{path.name} is not a readable safetensors file ({type(exc).__name__})"
    ends = [t["data_offsets"][1] for k, t in header.items() if k != "__metadata__" and isinstance(t, dict)]
    if ends and 8 + n + max(ends) > size:
        return f"{path.name} is cut off ({size} bytes of {8 + n + max(ends)})"
    return None


def _weights_problem(ckpt: Path) -> str | None:
    if (ckpt / SINGLE).is_file():
        return _safetensors_problem(ckpt / SINGLE)
    if (ckpt / INDEX).is_file():
        try:
            shards = sorted(set(json.loads((ckpt / INDEX).read_text())["weight_map"].values()))
        except (OSError, ValueError, KeyError, AttributeError) as exc:
            return f"{INDEX} does not parse ({type(exc).__name__})"
        for shard in shards:
            if not (ckpt / shard).is_file():
                return f"{shard}, listed in {INDEX}, is missing"
            if why := _safetensors_problem(ckpt / shard):
                return why
        return None
    if any((ckpt / name).is_file() for name in OTHER_WEIGHTS):
        return None
    return f"it holds no model weights ({SINGLE})"


def problem(ckpt: Path) -> str | None:
    """Why the checkpoint folder `ckpt` cannot be resumed from, or None."""
    state = ckpt / "trainer_state.json"
    if not state.is_file():
        return "it has no trainer_state.json (its save did not finish)"
    try:
        step = json.loads(state.read_text()).get("global_step")
    except (OSError, ValueError, AttributeError) as exc:
        return f"its trainer_state.json does not parse ({type(exc).__name__}: {' '.join(str(exc).split())[:80]})"
    if not isinstance(step, int) or isinstance(step, bool):
        return "its trainer_state.json states no global_step"
    return _weights_problem(ckpt)


@dataclass
class Pick:
    """The checkpoint to resume from (None: the run has none), and one line for each newer one passed over."""

    path: Path | None = None
    passed_over: list[str] = field(default_factory=list)


def checkpoints(run_dir: str | os.PathLike) -> list[Path]:
    """The run's `checkpoint-N` folders, newest (highest N) first."""
    found = [(int(m.group(1)), p) for p in Path(run_dir).glob("checkpoint-*") if (m := CHECKPOINT_RE.match(p.name))]
    return [p for _, p in sorted(found, key=lambda x: x[0], reverse=True) if p.is_dir()]


def pick(run_dir: str | os.PathLike) -> Pick:
    """The newest checkpoint of `run_dir` that loads; EnvError (one line) when it has some and none loads."""
    out, broken = Pick(), []
    for ckpt in checkpoints(run_dir):
        why = problem(ckpt)
        if why is None:
            out.path = ckpt
            out.passed_over = [
                f"checkpoint {name} of {Path(run_dir).name} is passed over: {why_}; resuming from {ckpt.name} "
                f"(remove {name} to silence this)"
                for name, why_ in broken
            ]
            return out
        broken.append((ckpt.name, why))
    if broken:
        name, why = broken[0]
        others = f" (and {len(broken) - 1} older, none of which loads either)" if len(broken) > 1 else ""
        raise EnvError(
            f"RUN_NAME={Path(run_dir).name} cannot resume: its newest checkpoint {name} is broken, {why}{others}, and "
            "starting it from step 0 would lose its position: restore a checkpoint into "
            f"{run_dir}, or start a fresh run (leave RUN_NAME empty)"
        )
    return out
