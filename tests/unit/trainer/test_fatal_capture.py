"""A capture with a FATAL finding costs its rollout, never the run.

OpenEnv's `to_training_trace` raises on any "[FATAL" finding; from `fetch_training_trace` TRL turns that
ValueError into `CaptureContractError` and stops the worker. `wait_for_completion` refuses such a rollout
first, as unscorable (TRL scores it `None`), so the run goes on.
"""

import pytest
from openenv.harbor.contract import to_training_trace
from openenv.harbor.models import HarborRolloutResult, HarborTurn

from trainer.rollouts.factory import HarborSessionFactory, prompt_row
from trainer.rollouts.session import HarborRolloutSession, RolloutFailed, UnscorableCapture

FATAL = "[FATAL] sampling_policy_changed: upstream did not preserve the session training policy"


class Runner:
    def __init__(self, res):
        self.res = res

    def run(self, ref, sampling, episode_id):
        return self.res


def poisoned():
    turn = HarborTurn(
        turn=0,
        node_id="n0",
        prompt_token_ids=[1, 2],
        completion_token_ids=[3, 4],
        per_token_logps=[-0.5, -0.5],
        loss_mask=[0, 0, 1, 1],
        trainable=True,
        text="ok",
    )
    return HarborRolloutResult(task_name="hello", trial_name="t9", reward=1.0, turns=[turn], findings=[FATAL])


def test_openenv_itself_refuses_to_train_it():
    with pytest.raises(ValueError, match="cannot train a capture with fatal validation findings"):
        to_training_trace(poisoned())


def test_the_session_drops_it_as_unscorable_and_counts_it():
    before = HarborRolloutSession.fatal_dropped
    session = HarborSessionFactory(Runner(poisoned())).create(prompt_row("s", 0, "x")["prompt"], episode_id="e")
    with pytest.raises(UnscorableCapture) as exc:
        session.wait_for_completion()
    assert isinstance(exc.value, RolloutFailed)
    assert str(exc.value) == (
        f"unscorable rollout t9 (hello): its capture has 1 FATAL finding(s), first: {FATAL}; dropped "
        f"(#{before + 1} in this worker), the run goes on"
    )
    assert HarborRolloutSession.fatal_dropped == before + 1
