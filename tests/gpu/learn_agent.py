"""Rollouts by real mini-swe-agent runs on a machine without Docker, handed to the trainer as the env server hands
them: the runner the trainer's rollout worker and evaluation call (`task_rows`, `run`, `evaluate`).

Per rollout, as the env server's `run_rollout` does it through OpenEnv's harbor code, with a local folder for the
sandbox (learn_sandbox.py says why that is faithful):
1. a capture session on OpenEnv's capture proxy, with the trainer's sampling (training) or OpenEnv's eval purpose
   and eval sampling (evaluation), as the scripted agent of the GPU check opens it;
2. mini-swe-agent 2.4.6 (learn_mini.py) in the rollout's own mount namespace, its model calls going to the proxy
   with the session key (OpenEnv 0.10.0's mini-swe-agent seam: MSWEA_API_KEY/OPENAI_API_KEY = the session,
   OPENAI_API_BASE/OPENAI_BASE_URL = the proxy's /v1), then the task's own verifier;
3. the proxy's export of the session (`/sessions/{id}/rollout`) turned into turns by OpenEnv's own
   `turns_from_document` (what the trainer trains on: the engine's token ids and logprobs), the reward from the
   verifier's reward.txt (None when it wrote none: unscorable, never 0).

Module-level and frozen: TRL pickles the runner into its spawned rollout process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
from learn_sandbox import make_sandbox, namespace_argv, read_reward, tail
from openenv.harbor.models import HarborRolloutResult, turns_from_document

from trainer.rollouts.factory import prompt_row

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class LocalTask:
    split: str  # the split's folder, as the env server names a local split
    index: int
    task_id: str
    instruction: str
    task_dir: str


def read_split(folder: str | Path) -> tuple[LocalTask, ...]:
    """The tasks of one split folder (Harbor task folders with instruction.md and tests/test.sh), in name order."""
    folder = Path(folder).resolve()
    dirs = sorted(p.parent for p in folder.glob("*/instruction.md"))
    if not dirs:
        raise SystemExit(f"learn: {folder} holds no */instruction.md: point it at a split of datasets/pick-answer")
    return tuple(
        LocalTask(str(folder), i, d.name, (d / "instruction.md").read_text(), str(d)) for i, d in enumerate(dirs)
    )


def agent_env(base: dict[str, str], capture_url: str, session: str, sandbox_root: Path) -> dict[str, str]:
    """What the agent's process sees: OpenEnv's mini-swe-agent seam's variables, mini-swe-agent's own switches for
    an unattended run, and litellm kept off the network (its price map is bundled)."""
    return {
        **base,
        "MSWEA_API_KEY": session,
        "OPENAI_API_KEY": session,
        "OPENAI_API_BASE": f"{capture_url}/v1",
        "OPENAI_BASE_URL": f"{capture_url}/v1",
        "MSWEA_CONFIGURED": "true",
        "MSWEA_SILENT_STARTUP": "1",
        "MSWEA_COST_TRACKING": "ignore_errors",
        "MSWEA_GLOBAL_CONFIG_DIR": str(sandbox_root / "mswea"),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "PYTHONUNBUFFERED": "1",
    }


@dataclass(frozen=True)
class LocalAgentRunner:
    capture_url: str
    model: str
    tasks: tuple[LocalTask, ...]
    work_root: str
    step_limit: int = 2
    agent_timeout_s: float = 120.0
    python: str = sys.executable

    def task_rows(self) -> list[dict]:
        return [prompt_row(t.split, t.index, t.instruction, t.task_id) for t in self.tasks]

    def run(self, ref, sampling, episode_id) -> HarborRolloutResult:
        return self._rollout(ref, {"sampling": sampling}, "train")

    def evaluate(self, ref, eval_sampling) -> HarborRolloutResult:
        return self._rollout(ref, {"purpose": "eval", "eval_sampling": eval_sampling}, "eval")

    def task(self, ref) -> LocalTask:
        for t in self.tasks:
            if t.split == ref.split and t.index == ref.index:
                return t
        raise KeyError(f"no task {ref.index} in split {ref.split}")

    def _rollout(self, ref, session: dict, kind: str) -> HarborRolloutResult:
        task = self.task(ref)
        t0 = time.monotonic()
        sandbox = make_sandbox(Path(self.work_root) / kind, Path(task.task_dir))
        (sandbox.root / "task.md").write_text(task.instruction)
        with httpx.Client(base_url=self.capture_url, timeout=60) as http:
            created = http.post("/sessions", json={**session, "max_model_calls": self.step_limit}).raise_for_status()
            sid = created.json()["session_id"]
            argv = [
                self.python,
                str(HERE / "learn_mini.py"),
                str(sandbox.root / "task.md"),
                str(self.step_limit),
                self.model,
                str(sandbox.root / "trajectory.json"),
            ]
            env = agent_env(dict(os.environ), self.capture_url, sid, sandbox.root)
            done = subprocess.run(
                namespace_argv(sandbox, argv, self.agent_timeout_s),
                env=env,
                capture_output=True,
                text=True,
                timeout=self.agent_timeout_s + 60,
            )
            document = (
                http.get(f"/sessions/{sid}/rollout", params={"include_messages": "true"}).raise_for_status().json()
            )
            http.delete(f"/sessions/{sid}")
        reward = read_reward(sandbox)
        error = None
        if done.returncode != 0 or reward is None:
            # The namespace itself failed (no root, no unshare), or the verifier wrote no reward: unscorable.
            error = (
                f"exit {done.returncode}; {done.stderr.strip()[-300:]} agent: {tail(sandbox.logs / 'agent' / 'agent.txt')}"
                f" verifier: {tail(sandbox.logs / 'verifier' / 'test-stdout.txt', 200)}"
            )
        turns = turns_from_document(document)
        return HarborRolloutResult(
            task_id=task.task_id,
            task_name=task.task_id,
            dataset=Path(task.split).name,
            harness="mini-swe-agent",
            sandbox="local-namespace",
            trial_name=sandbox.root.name,
            session_id=sid,
            reward=reward,
            rollout_type=created.json().get("rollout_type") or document.get("rollout_type", kind),
            capture_level=document.get("capture_level", "tokens"),
            turns=turns,
            n_turns=document["stats"]["n_turns"],
            n_roots=document["stats"]["n_roots"],
            findings=[f for f in document.get("validation", []) if not f.startswith("[INFO]")],
            wall_s=round(time.monotonic() - t0, 2),
            agent_log_tail=tail(sandbox.logs / "agent" / "agent.txt", 2000),
            ok=error is None,
            error=error,
            exception_type=None if error is None else "LocalRolloutError",
        )
