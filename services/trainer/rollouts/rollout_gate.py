"""The gate a pre-spawned rollout child waits at until TRL would have started it.

TRL 1.16.0 spawns its rollout child only in `on_train_begin`, after the cold weight sync, and the child
then re-imports torch, transformers, TRL and OpenEnv before its first rollout. On the 2-core CPU form
that import is tens of seconds of the time to the first step, spent while nothing else runs. The trainer
therefore spawns the child while the warm-up rollout runs (worker.HarborRolloutWorker.prestart); the
child imports and builds its loop, then waits here. TRL's own `start()`, after the sync, opens the gate:
no rollout starts before the engine holds the trainer's weights, the order TRL guarantees.

A file, not a multiprocessing.Event: TRL's `start()` pickles the loop's kwargs to check them, and a
multiprocessing Event refuses to be pickled outside of spawning. The file also carries the rollout
position TRL sets on resume (`dataset_start_index`), which TRL only knows after the child was spawned.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import tempfile
import time


class StartGate:
    def __init__(self, path: str):
        self.path = path

    @classmethod
    def create(cls) -> StartGate:
        return cls(os.path.join(tempfile.mkdtemp(prefix="asyncgrpo-rollout-gate-"), "gate.json"))

    def _write(self, state: dict) -> None:
        tmp = f"{self.path}.tmp"
        with open(tmp, "w") as f:
            json.dump(state, f)
        os.replace(tmp, self.path)  # the child reads a whole file or none

    def open(self, start_index: int) -> None:
        self._write({"go": True, "start_index": int(start_index)})

    def close(self) -> None:
        """The run stops before training started: a child still waiting leaves without a rollout."""
        if not os.path.exists(self.path) and os.path.isdir(os.path.dirname(self.path)):
            self._write({"go": False})

    def remove(self) -> None:
        """The creator's part, once no child reads the gate: its folder goes (one per trainer start)."""
        shutil.rmtree(os.path.dirname(self.path), ignore_errors=True)

    def wait(self, poll_s: float = 0.2) -> int | None:
        """In the child: the start index once the gate opens; None when it was closed or the parent died
        (a child of a killed trainer must not start rollouts nobody reads)."""
        parent = multiprocessing.parent_process()
        while True:
            try:
                with open(self.path) as f:
                    state = json.load(f)
            except FileNotFoundError:
                if parent is not None and not parent.is_alive():
                    return None
                time.sleep(poll_s)
                continue
            return state["start_index"] if state.get("go") else None
