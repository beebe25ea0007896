"""Tell the Trainer's end-of-training summary log from a step's log.

transformers ends `train()` with one more `log()`: the summary (`train_runtime`, `train_loss`, ...), at the last
step. TRL 1.16.0's AsyncGRPOTrainer.log drains the rollout worker's metrics queue into EVERY log, that one
included, so the summary also carries the harbor/* and rollout/* figures of groups that finished after the last
optimizer step and were never trained on, stamped with that step. The first full learning-gate run showed it:
step 15 logged a training reward of 0.79 and the curve then said 0.99, the summary's. Readers of per-step figures
(the curve, the stop rules) skip it: the run is over, and those groups are not the step's.
"""

from __future__ import annotations

from collections.abc import Mapping

KEY = "train_runtime"  # transformers' speed_metrics("train", ...), only in the summary


def is_summary(logs: Mapping) -> bool:
    return KEY in logs
