"""One rollout as an OpenEnv session that TRL's loop-owning harness worker can train on.

The agent owns its loop (inside the sandbox, via the env server); this session only starts the rollout,
waits for it, and hands back what OpenEnv's training contract (`openenv.harbor.contract`) makes of the
captured turns. Nothing is re-rendered: every token the trainer sees is the engine's own.

Failure semantics, which are what keep a run honest:

- sandbox/verifier failure (no reward at all) -> `RolloutFailed` from `wait_for_completion`; TRL scores
  the rollout unscorable (`None`), drops it from its group's baseline, trains none of its tokens;
- a reward that is there but unreadable (REWARD_KEY absent from an empty `rewards`, NaN, inf) or a rollout with
  no captured model turn (it failed before its first model call: the verifier's 0 is not the policy's doing) ->
  `verify()` returns `env_reward=None`: out of the baseline, and trainer/rollouts/worker.py drops its rows (TRL 1.16.0
  would train them at advantage 0, diluting the loss normaliser);
- a capture with a FATAL finding (OpenEnv's `to_training_trace` refuses it, e.g. `sampling_policy_changed`
  after code in the sandbox sent a crafted request) -> `UnscorableCapture` (a `RolloutFailed`) from
  `wait_for_completion`: the same unscorable `None`, counted in `harbor/unscorable_frac` and logged with
  the finding. It is one rollout's fault, so it must not reach `fetch_training_trace`, where TRL turns
  any ValueError into `CaptureContractError` and stops the whole run;
- agent timeout with a graded result -> `TimeoutError`; TRL flags `timed_out` and trains what was captured;
- a capture that breaks the token contract (no prompt_token_ids, an eval-grade engine) -> `ValueError`
  from `fetch_training_trace`, which TRL turns into `CaptureContractError` and STOPS the run at the first
  such rollout: continuing would train on nothing, or on re-rendered guesses.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from openenv.core.harness import ResourceSession, TrainingTrace, VerifyResult
from openenv.core.harness.training import TrainingTurn
from openenv.harbor.contract import to_training_trace
from openenv.harbor.models import HarborRolloutResult

from . import reward as reward_mod
from .reward import base_reward

logger = logging.getLogger(__name__)

VLLM_FLAGS = "--return-tokens-as-token-ids and --logprobs-mode processed_logprobs"
# Fewer supervised tokens than this can legitimately all be p=1.0 (a forced closing token); more cannot.
ZERO_FILL_MIN_TOKENS = 4


class RolloutFailed(RuntimeError):
    """The sandbox, agent or verifier failed: unscorable, not zero."""


class UnscorableCapture(RolloutFailed):
    """The capture carries a FATAL validation finding: this rollout cannot be trained, the run goes on."""


def fatal_findings(result: HarborRolloutResult) -> list[str]:
    """The findings that make OpenEnv 0.10.0's `to_training_trace` raise (it tests for "[FATAL")."""
    return [f for f in result.findings if "[FATAL" in f]


def captured_turns(result: HarborRolloutResult) -> int:
    """Model calls the capture holds for this rollout (agent turns with sampled tokens, not discarded)."""
    return sum(1 for t in result.turns if t.role == "agent" and not t.discarded and t.completion_token_ids)


def check_capture(result: HarborRolloutResult) -> None:
    """Raise (naming the vLLM flags) when a rollout carries no engine token ids to train on."""
    where = f"rollout {result.trial_name or result.session_id or '?'} ({result.task_name or result.task_id})"
    if result.rollout_type != "train":
        raise ValueError(
            f"{where} came back as an {result.rollout_type!r} rollout (capture_level={result.capture_level}): the "
            f"engine returned no token ids or raw logprobs. Start vLLM with {VLLM_FLAGS}; no training is possible "
            "without them"
        )
    for turn in result.turns:
        if turn.role != "agent" or turn.discarded or not turn.completion_token_ids:
            continue
        if not turn.prompt_token_ids:
            raise ValueError(
                f"{where}: captured turn {turn.turn} has no prompt_token_ids, so it cannot be trained without "
                f"re-rendering the prompt (which forks and corrupts training). Start vLLM with {VLLM_FLAGS}"
            )


def mask_zero_filled(trace: TrainingTrace) -> tuple[TrainingTrace, int]:
    """Never train against a logprob of 0.0 that ingest filled in.

    OpenEnv masks a turn whose logprobs were rejected on ingest and zero-fills them; TRL then builds
    `old_log_probs` from those zeros, harmless only while the mask stays 0 (TRL's loss reads positions
    with mask 1 only). A supervised completion whose logprobs are ALL exactly 0.0 is that same zero-fill
    with the mask lost somewhere upstream (a sampled token at p=1.0, over many tokens, does not happen at
    temperature > 0). Such a turn is kept as context and masked here, with a warning.
    """
    masked = 0
    turns = []
    for turn in trace.turns:
        n_prompt = len(turn.prompt_token_ids)
        supervised = [lp for lp, m in zip(turn.per_token_logps, turn.loss_mask[n_prompt:], strict=True) if m]
        if len(supervised) >= ZERO_FILL_MIN_TOKENS and all(lp == 0.0 for lp in supervised):
            masked += 1
            logger.warning(
                "turn %s: %d supervised tokens all carry logprob 0.0 (zero-filled on ingest); masking it out",
                turn.node_id,
                len(supervised),
            )
            turn = TrainingTurn(**{**turn.model_dump(), "loss_mask": [0] * len(turn.loss_mask)})
        turns.append(turn)
    return TrainingTrace(turns=turns), masked


class HarborRolloutSession(ResourceSession):
    """A loop-owning session (OpenEnv `TrainableSession`): wait, then read the contract's trace."""

    def __init__(self, run: Callable[[], HarborRolloutResult], instruction: str, reward_key: str = ""):
        self._run = run
        self._instruction = instruction
        self._reward_key = reward_key
        self.result: HarborRolloutResult | None = None
        self.masked_zero_filled = 0

    # Rollouts dropped for a FATAL capture finding in this process (TRL runs sessions in one worker process).
    fatal_dropped = 0

    # --- loop-owning contract -------------------------------------------------------------------
    def wait_for_completion(self, timeout_s: float | None = None) -> int:
        if self.result is None:
            self.result = self._run()
        result = self.result
        if result.reward is None and not result.rewards:
            raise RolloutFailed(
                f"unscorable rollout {result.trial_name or '?'} ({result.task_name}): "
                f"{result.exception_type or 'no reward'}: {(result.error or '').strip()[:300]}"
            )
        fatal = fatal_findings(result)
        if fatal:
            HarborRolloutSession.fatal_dropped += 1
            raise UnscorableCapture(
                f"unscorable rollout {result.trial_name or '?'} ({result.task_name}): its capture has "
                f"{len(fatal)} FATAL finding(s), first: {fatal[0][:200]}; dropped "
                f"(#{HarborRolloutSession.fatal_dropped} in this worker), the run goes on"
            )
        if result.exception_type and "timeout" in result.exception_type.lower():
            raise TimeoutError(f"agent timed out on {result.task_name}: {result.error}")
        return 0

    def fetch_training_trace(self) -> TrainingTrace:
        if self.result is None:
            raise RuntimeError("fetch_training_trace() before wait_for_completion()")
        check_capture(self.result)
        trace, self.masked_zero_filled = mask_zero_filled(to_training_trace(self.result))
        return trace

    # --- ResourceSession ------------------------------------------------------------------------
    def initial_messages(self) -> list[dict[str, Any]]:
        return [{"role": "user", "content": self._instruction}]

    def list_tools(self) -> list:
        return []  # the agent brings its own tools inside the sandbox

    def call_tool(self, name: str, arguments: dict[str, Any]):
        raise NotImplementedError("the agent owns its loop: tools run inside the sandbox, not through the trainer")

    def verify(self, transcript, final_state=None) -> VerifyResult:
        result = self.result
        if result is None:
            reward_mod.note_verdict(None)
            return VerifyResult(env_reward=None)
        captured = captured_turns(result)
        reward_mod.note_verdict(reward_mod.passed(result.reward, result.rewards) if captured else None)
        return VerifyResult(
            env_reward=base_reward(result.reward, result.rewards, self._reward_key) if captured else None,
            done=True,
            metrics={
                "turns": result.n_turns,
                "captured_turns": captured,
                "wall_s": result.wall_s,
                "budget_stops": result.budget_stop_count,
            },
        )

    def close(self) -> None:
        pass
