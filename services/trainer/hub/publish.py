"""Push the trained model (and optionally each retained checkpoint) to the Hugging Face Hub, in the background.

A push is minutes of upload over a link that fails; a training step must never wait for it or die of
it. So pushes run on one background thread, in order, each retried with a doubling delay
(HUB_PUSH_ATTEMPTS, HUB_RETRY_S). Every state change is written to status.json (`hub`) and printed: a
failed push is visible in `scripts/status`, never silent. A newer checkpoint supersedes an older one
still waiting (only the latest matters); the final model is never dropped, and the trainer waits for
it at exit (HUB_FINAL_WAIT_S). When it still fails, the status says so and names the command that
retries it from the bucket: `scripts/publish <run-name>`.

The client is huggingface_hub's own `HfApi` (`create_repo`, `upload_folder`; read at 1.33.0). Its
address is HF_ENDPOINT, which is also how the tests point it at a local stand-in of the Hub's HTTP
API (tests/standins/hub.py); nothing here knows about the stand-in. The token (HUB_TOKEN) reaches
the trainer service only, and is never printed.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Resume state, not model: optimizer/scheduler/RNG states are gigabytes and useless to a model user;
# training_args.bin is a pickle.
IGNORE = ["optimizer.pt", "scheduler.pt", "rng_state*.pth", "training_args.bin", "global_step*/**", ".*"]


@dataclass
class Job:
    folder: Path
    label: str
    final: bool = False
    card: str = ""


class HubPublisher:
    def __init__(
        self,
        hub: Any,
        on_state: Callable[[dict], None] = lambda state: None,
        *,
        api: Any = None,
        sleep: Callable[[float], Any] | None = None,
        say: Callable[[str], None] = lambda line: print(line, flush=True),
    ):
        if api is None:
            from huggingface_hub import HfApi

            api = HfApi(endpoint=hub.endpoint or None, token=hub.token or None)
        self.api = api
        self.hub = hub
        self._on_state = on_state
        self._say = say
        self._stop = threading.Event()
        self._sleep = sleep or self._stop.wait
        self._cv = threading.Condition()
        self._pending: list[Job] = []
        self._busy = False
        self.state: dict[str, Any] = {
            "repo": hub.model_id,
            "state": "idle",
            "pushed": [],
            "pending": [],
            "attempt": 0,
            "last_error": None,
            "next_retry_at": None,
        }
        self._thread = threading.Thread(target=self._loop, name="hub-publisher", daemon=True)
        self._thread.start()

    # --- called from the training loop: never blocks on the network ------------------------------
    def submit(self, job: Job) -> None:
        with self._cv:
            # Only the newest checkpoint is worth uploading; the final model is never superseded.
            self._pending = [j for j in self._pending if j.final] + [job]
            self._set(pending=[j.label for j in self._pending])
            self._cv.notify_all()

    def wait(self, timeout_s: float) -> bool:
        """Until every submitted push finished (pushed or given up); False on timeout."""
        deadline = time.monotonic() + timeout_s
        with self._cv:
            while self._pending or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cv.wait(min(left, threading.TIMEOUT_MAX))
        return True

    def close(self) -> None:
        self._stop.set()
        with self._cv:
            self._cv.notify_all()

    # --- the background thread -------------------------------------------------------------------
    def _set(self, **fields) -> None:
        self.state.update(fields)
        try:
            self._on_state(dict(self.state))
        except Exception as exc:  # noqa: BLE001 - a status write must not kill the publisher
            self._say(f"hub: could not record the push state ({exc})")

    def _loop(self) -> None:
        while not self._stop.is_set():
            with self._cv:
                while not self._pending and not self._stop.is_set():
                    self._cv.wait()
                if self._stop.is_set():
                    return
                job = self._pending.pop(0)
                self._busy = True
                self._set(pending=[j.label for j in self._pending])
            try:
                self._push_with_retries(job)
            finally:
                with self._cv:
                    self._busy = False
                    self._cv.notify_all()

    def _push_with_retries(self, job: Job) -> bool:
        repo = self.hub.model_id
        for attempt in range(1, self.hub.attempts + 1):
            self._set(state="pushing", current=job.label, attempt=attempt, next_retry_at=None)
            try:
                url = self.push(job)
            except Exception as exc:  # noqa: BLE001 - any failure is retried, then reported
                error = f"{type(exc).__name__}: {exc}".splitlines()[0][:500]
                if attempt == self.hub.attempts:
                    self._set(
                        state="failed",
                        last_error=f"{job.label}: {error}",
                        next_retry_at=None,
                        fix=f"retry from the bucket: scripts/publish {job.folder.parent.name} (or check HUB_MODEL_ID, "
                        "HUB_TOKEN, HF_ENDPOINT)",
                    )
                    self._say(f"hub: push of {job.label} to {repo} FAILED after {attempt} attempts: {error}")
                    return False
                delay = self.hub.retry_s * 2 ** (attempt - 1)
                self._set(state="retrying", last_error=f"{job.label}: {error}", next_retry_at=time.time() + delay)
                self._say(
                    f"hub: push of {job.label} to {repo} failed (attempt {attempt}/{self.hub.attempts}): {error}; "
                    f"retrying in {delay:.0f}s"
                )
                self._sleep(delay)
                if self._stop.is_set():
                    return False
                continue
            pushed = [*self.state["pushed"], job.label]
            self._set(state="pushed", pushed=pushed, url=url, last_error=None, fix=None, current=None)
            self._say(f"hub: pushed {job.label} to {url}")
            return True
        return False

    def push(self, job: Job) -> str:
        repo = self.api.create_repo(self.hub.model_id, private=self.hub.private, exist_ok=True)
        self.api.upload_folder(
            repo_id=self.hub.model_id,
            folder_path=str(job.folder),
            commit_message=f"{job.label} ({job.folder.parent.name})",
            ignore_patterns=list(IGNORE),
        )
        if job.card and not (job.folder / "README.md").is_file():
            self.api.upload_file(
                path_or_fileobj=job.card.encode(),
                path_in_repo="README.md",
                repo_id=self.hub.model_id,
                commit_message=f"model card for {job.label}",
            )
        return str(repo)


def main(argv: list[str] | None = None) -> int:
    """Push a run's final model (or a checkpoint) from the bucket, in the foreground: the retry for a
    failed background push, and a way to publish a run that ended before its final push."""
    parser = argparse.ArgumentParser(prog="python -m trainer.hub.publish", description=main.__doc__)
    parser.add_argument("run", help="run name (folder under <bucket>/checkpoints)")
    parser.add_argument("--folder", default="final", help="final (default) or checkpoint-N")
    args = parser.parse_args(argv)

    from stack.readers.trainer import from_env

    s = from_env()
    if not s.hub.model_id:
        print("publish: set HUB_MODEL_ID (e.g. your-name/qwen3-harbor-grpo) and HUB_TOKEN in .env", file=sys.stderr)
        return 2
    folder = s.checkpoint_root / args.run / args.folder
    if not folder.is_dir():
        print(f"publish: {folder} does not exist: name a run and a folder that are on the bucket", file=sys.stderr)
        return 2
    publisher = HubPublisher(s.hub)
    publisher.submit(Job(folder=folder, label=args.folder, final=True))
    publisher.wait(float("inf"))
    publisher.close()
    return 0 if publisher.state["state"] == "pushed" else 1


if __name__ == "__main__":
    sys.exit(main())
