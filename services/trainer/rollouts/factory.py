"""The Harbor session factory: the piece that joins TRL's AsyncGRPO to OpenEnv's Harbor env server.

TRL's `HarnessRolloutWorker` calls `factory.create(prompt, seed=group_id, episode_id=...)` once per
rollout, from a spawned child process, so everything here is module-level and picklable: the worker is
handed `functools.partial(HarborSessionFactory, runner=..., reward_key=...)` and adds `sampling=` (the
trainer's policy) itself.

Prompt rows come from the env server's task list (`task_rows`); each row's user message carries its
task reference, and TRL gives every generation of a group the same row, so a group is N attempts at one
task: the comparison GRPO needs.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any

import httpx
import websockets
from openenv.core.harness import ResourceSessionFactory
from openenv.harbor.client import HarborEnv
from openenv.harbor.models import HarborRolloutResult

from stack.readers.trainer import Settings

from .session import HarborRolloutSession
from .waiting import Backoff, is_refusal

TASK_FIELD = "harbor_task"  # on the prompt's user message: "<index>@<split>"
# Sandbox build/start and verification run outside the agent's own timeout.
SETUP_MARGIN_S = 900.0
# What an env server that died or restarts looks like to its clients, at any phase of a call: a refused or
# reset socket (OSError, ConnectionError among them), httpx's transport errors (the Task API), and the MCP
# websocket's (websockets 15: `ConnectionClosedError: no close frame received or sent` when the server is
# killed mid-rollout, which killed the trainer during its warm-up; `InvalidStatus` while it restarts).
# TimeoutError is an OSError too, but it is the rollout's own deadline, not a lost server: never waited out.
TRANSPORT_ERRORS = (OSError, httpx.TransportError, websockets.exceptions.WebSocketException)
# How deep OpenEnv's connect clean-up nests its masking TypeError (measured): one level when the MCP session's HTTP
# request is refused, two when the session is granted and the websocket's connect then fails (EnvClient's clean-up,
# then MCPClientBase's); a little room beyond.
_MASK_DEPTH = 4


def transport_failure(exc: BaseException) -> BaseException | None:
    """The transport error behind `exc` (itself, or the one OpenEnv hid), else None.

    OpenEnv 0.10.0's client hides a failed connect: its connect clean-up awaits `HarborEnv.close()`, a plain
    method that returns None, so a refused connection comes out as `TypeError: object NoneType can't be used in
    'await' expression` raised while handling the httpx/websocket error (measured against a closed port, for the
    task list and for a rollout). A trainer started while the env server is down, or one whose /health probe
    passed a moment before the server died, would stop on that TypeError. Only TypeErrors are looked through: any
    other error is the server's or ours, not the wire's. A bare TimeoutError is the rollout's own deadline (the
    callers re-raise it first); one behind the mask is the connect's open timeout, a server that did not answer.
    """
    seen: BaseException | None = exc
    for _ in range(_MASK_DEPTH + 1):
        if isinstance(seen, TRANSPORT_ERRORS):
            return seen
        if not isinstance(seen, TypeError):
            return None
        seen = seen.__context__
    return None


@dataclass(frozen=True)
class TaskRef:
    split: str
    index: int
    instruction: str = ""


def task_ref_from_prompt(prompt: Any) -> TaskRef:
    messages = prompt if isinstance(prompt, list) else [prompt]
    for message in messages:
        tag = message.get(TASK_FIELD) if isinstance(message, dict) else None
        if tag:
            index, _, split = str(tag).partition("@")
            return TaskRef(split=split, index=int(index), instruction=str(message.get("content") or ""))
    raise ValueError(
        f"prompt row has no {TASK_FIELD!r} field: build the dataset with trainer.rollouts.factory.task_rows()"
    )


def prompt_row(split: str, index: int, instruction: str, task_id: str = "") -> dict[str, Any]:
    return {
        "prompt": [{"role": "user", "content": instruction or task_id, TASK_FIELD: f"{index}@{split}"}],
        "task_id": task_id,
    }


@dataclass(frozen=True)
class EnvServerRunner:
    """Runs one rollout through the env server's `run_rollout` MCP tool (HarborEnv client)."""

    env_server_url: str
    harness: str
    sandbox: str
    llm_url: str
    model: str
    agent_step_limit: int
    agent_timeout_s: float
    reward_key: str = ""
    status_path: str = ""  # where a wait for the env server is reported (trainer/rollouts/waiting.py)
    # The main process's rollouts (warm-up, evaluation) check that the engine still answers at each wait, and
    # stop the run when it is gone (trainer/watch/engine_gone.py). None: wait as long as it takes. That is the rollout
    # worker's copy, whose waits the trainer's own check_health bounds instead.
    engine_watch: Any = dataclasses.field(default=None, compare=False, repr=False)

    def task_rows(self) -> list[dict[str, Any]]:
        backoff = Backoff(self.status_path)
        while True:
            try:
                rows = self._task_rows()
            except TimeoutError:
                raise
            except Exception as exc:
                lost = transport_failure(exc)
                if lost is None:
                    raise
                backoff.wait(f"env server {self.env_server_url} unreachable for the task list ({_named(lost)})")
                continue
            backoff.done()
            return rows

    def _task_rows(self) -> list[dict[str, Any]]:
        rows = []
        with HarborEnv(base_url=self.env_server_url) as env:
            for split in env.splits():
                name = split["name"] if isinstance(split, dict) else str(split)
                count = env.num_tasks(name)
                for ref in env.get_task_range(name, 0, count):
                    rows.append(prompt_row(name, ref.index, ref.instruction, ref.task_id))
        if not rows:
            raise RuntimeError(
                f"the env server at {self.env_server_url} lists no tasks: check DATASETS on the env-server service"
            )
        return rows

    def run(self, ref: TaskRef, sampling: dict | None, episode_id: str | None) -> HarborRolloutResult:
        """One rollout; while the env server refuses to start it, or cannot be reached, wait and retry."""
        return self._waiting(lambda: self._run_once(ref, sampling))

    def watching(self, engine_watch) -> EnvServerRunner:
        """This runner, its waits bounded by `engine_watch.check` (an engine_gone.HealthWatch)."""
        return dataclasses.replace(self, engine_watch=engine_watch)

    def _waiting(self, call, what: str = "rollouts") -> HarborRolloutResult:
        """`call()` (one rollout) until the env server takes it and answers. A connection lost while the
        rollout ran is waited out like an unreachable server, and the rollout runs again: the server that
        ran it is gone with its capture session (its sandbox is reaped when it starts again), so nothing of
        it was scored, and running it again is one more sample of the same policy."""
        backoff = Backoff(self.status_path)

        def wait(reason: str) -> None:
            if self.engine_watch is not None:
                # An engine gone for engine_gone.GONE_AFTER_S stops the run (raises EngineGone) instead of waiting.
                self.engine_watch.check(waiting_for=what)
            backoff.wait(reason)

        while True:
            # Asked first, over plain HTTP: with the env server gone, OpenEnv's client fails inside its own
            # cleanup (measured: httpx.ConnectError, then "TypeError: object NoneType can't be used in
            # 'await' expression"), which would make every rollout an instant unscorable one.
            down = self._unreachable()
            if down:
                wait(f"env server {self.env_server_url} unreachable ({down}); is env-server up?")
                continue
            try:
                result = call()
            except TimeoutError:
                raise
            except websockets.exceptions.ConnectionClosed as exc:
                wait(
                    f"connection to the env server {self.env_server_url} lost during the rollout ({_named(exc)}); "
                    "it runs again once the env server answers"
                )
                continue
            except Exception as exc:  # before the rollout started (its connect), or a socket error on the way
                lost = transport_failure(exc)
                if lost is None:
                    raise  # not the wire: a real failure, the caller's to report
                wait(f"env server {self.env_server_url} unreachable ({_named(lost)})")
                continue
            if is_refusal(result):
                wait(f"env server refused: {result.error}")
                continue
            backoff.done()
            return result

    def _unreachable(self) -> str:
        """'' when something answers HTTP at the env server's address (any status), else why not."""
        try:
            httpx.get(f"{self.env_server_url}/health", timeout=10.0)
        except httpx.TransportError as exc:
            return f"{type(exc).__name__}: {exc}"
        return ""

    def _run_once(self, ref: TaskRef, sampling: dict | None) -> HarborRolloutResult:
        return self._rollout(ref, sampling=sampling)

    def _rollout(self, ref: TaskRef, **purpose) -> HarborRolloutResult:
        """One rollout of `ref` on a client of its own; `purpose` is the training `sampling`, or the eval purpose
        and its sampling (`_evaluate_once`)."""
        with HarborEnv(base_url=self.env_server_url, message_timeout_s=self.agent_timeout_s + SETUP_MARGIN_S) as env:
            return env.run_rollout(
                split=ref.split,
                task_index=ref.index,
                harness=self.harness,
                sandbox=self.sandbox,
                reward_key=self.reward_key,
                llm_url=self.llm_url,
                model=self.model,
                agent_timeout_sec=self.agent_timeout_s,
                agent_step_limit=self.agent_step_limit,
                **purpose,
            )

    def evaluate(self, ref: TaskRef, eval_sampling: dict) -> HarborRolloutResult:
        """One EVAL rollout (`_evaluate_once`), waiting out an env server that is away as `run` does."""
        return self._waiting(lambda: self._evaluate_once(ref, eval_sampling), "evaluation rollouts")

    def _evaluate_once(self, ref: TaskRef, eval_sampling: dict) -> HarborRolloutResult:
        """One EVAL rollout: same env server, sandbox and capture proxy as training, but OpenEnv's eval
        purpose (read at openenv 0.10.0, `openenv.harbor.client.run_rollout` and
        `core.harness.capture.sessions`): the proxy applies `eval_sampling` (temperature/top_p/top_k only)
        instead of the training policy, refuses a training `sampling` on the same session, and stamps the
        result `rollout_type="eval"`, so an eval rollout can never be mistaken for training data."""
        return self._rollout(ref, purpose="eval", eval_sampling=eval_sampling)


def _named(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"


class HarborSessionFactory(ResourceSessionFactory[HarborRolloutSession]):
    """OpenEnv `ResourceSessionFactory` over any runner with `run(ref, sampling, episode_id)`."""

    def __init__(self, runner: Any, reward_key: str = "", sampling: dict | None = None):
        self.runner = runner
        self.reward_key = reward_key
        self.sampling = sampling

    def create(self, task: Any, seed: int | None = None, episode_id: str | None = None) -> HarborRolloutSession:
        ref = task_ref_from_prompt(task)
        run = functools.partial(self.runner.run, ref, self.sampling, episode_id)
        return HarborRolloutSession(run, ref.instruction, self.reward_key)


def runner_from_settings(s: Settings) -> EnvServerRunner:
    """The runner every entry point (training, evaluation, screening) talks to the env server through."""
    return EnvServerRunner(
        env_server_url=s.env_server_url,
        harness=s.harness,
        sandbox=s.sandbox,
        llm_url=s.llm_url,
        model=s.model,
        agent_step_limit=s.agent_step_limit,
        agent_timeout_s=s.agent_timeout_s,
        reward_key=s.reward_key,
        status_path=str(s.status_path),
    )
