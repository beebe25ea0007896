"""Hub publishing from the training loop: checkpoints as they are saved (HUB_PUSH_CHECKPOINTS), the final
model at the end, each with its model card. The pushes themselves run on trainer.hub.publish's background
thread; this callback only hands folders over and, at the very end, waits for the final push."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from .model_card import card_settings, installed_versions, render, reward_summary
from .publish import HubPublisher, Job


def eval_documents(run_dir: Path, baseline: str) -> list[dict]:
    """Baseline (if one was run) first, then the run's periodic evaluations in step order."""
    docs = []
    if baseline and Path(baseline).is_file():
        try:
            docs.append(json.loads(Path(baseline).read_text()))
        except ValueError:
            pass
    steps = []
    for path in (run_dir / "evals").glob("step-*.json"):
        try:
            steps.append(json.loads(path.read_text()))
        except ValueError:
            continue
    return docs + sorted(steps, key=lambda d: d.get("step") or 0)


class HubPublish(TrainerCallback):
    def __init__(self, settings: Any, status: Any, publisher: HubPublisher | None = None):
        self.s = settings
        self.status = status
        self.publisher = publisher or HubPublisher(settings.hub, on_state=lambda state: status.update(hub=state))

    def card(self, state) -> str:
        return render(
            repo_id=self.s.hub.model_id,
            run_name=self.s.run_name,
            step=state.global_step,
            settings=card_settings(self.s),
            versions=installed_versions(),
            reward=reward_summary(state.log_history),
            evals=eval_documents(self.s.run_dir, self.s.evaluation.baseline),
        )

    def on_save(self, args, state, control, **kwargs):
        if self.s.hub.push_checkpoints:
            folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            self.publisher.submit(Job(folder=folder, label=folder.name, card=self.card(state)))

    def on_train_end(self, args, state, control, model=None, processing_class=None, **kwargs):
        final = Path(self.s.run_dir) / "final"
        try:
            model.save_pretrained(final)
            if processing_class is not None:
                processing_class.save_pretrained(final)
            (final / "README.md").write_text(self.card(state))
        except Exception as exc:  # noqa: BLE001 - training is done and its checkpoints are saved: report, not fail
            error = f"could not write {final}: {type(exc).__name__}: {exc}"[:500]
            self.status.update(hub={**self.publisher.state, "state": "failed", "last_error": error})
            print(f"hub: {error}; nothing pushed (the checkpoints are on the bucket)", flush=True)
            self.publisher.close()
            return
        self.publisher.submit(Job(folder=final, label="final", final=True))
        print(
            f"hub: waiting up to {self.s.hub.final_wait_s:.0f}s for the final push to {self.s.hub.model_id}", flush=True
        )
        if not self.publisher.wait(self.s.hub.final_wait_s):
            self.status.update(hub={**self.publisher.state, "state": "failed", "last_error": "final push timed out"})
        self.publisher.close()
