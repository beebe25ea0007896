"""What TRL 1.16.0 trains from a group, through our worker's `_score_group` and TRL's own `_run_session`.

- A session's verdict reaches the reward function through TRL's real call order (verify, then the reward function,
  on one pool thread).
- An all-correct group whose tool calls range 3..29: the efficiency bonus must not become the group's whole spread
  (main: advantages +1.22 .. -2.04).
- A rollout whose reward is unreadable (NaN) or that made no model call leaves the baseline AND trains no row
  (main: its rows trained at advantage 0, or its verifier 0 sat in the baseline).

The loop object is built without its constructor (which spawns nothing here but wants an engine and a dataset):
only the attributes TRL's `_run_session` and `_score_group` read are set, as their 1.16.0 source names them.
Runs in the trainer image: tests/run-in-image trainer -q tests/integration/trainer/test_scoring_defaults.py
"""

import asyncio
import threading
from collections import defaultdict

import numpy as np
import pytest
from accelerate.state import PartialState
from openenv.harbor.models import HarborRolloutResult, HarborTurn
from trl.experimental.async_grpo.async_rollout_worker import RolloutGroup, TrainingSequence

from trainer.rollouts.factory import HarborSessionFactory, prompt_row
from trainer.rollouts.reward import HarborReward
from trainer.rollouts.worker import HarborRolloutLoop

PROMPT, OUT = [1, 2, 3], [4, 5, 6, 7]
CALLS = [3, 5, 8, 10, 12, 15, 20, 29]  # the all-correct group


@pytest.fixture(autouse=True)
def _accelerate_state():
    PartialState()  # TRL logs through accelerate's logger, which refuses to log before its state exists


class Runner:
    def __init__(self, result):
        self.result = result

    def run(self, ref, sampling, episode_id):
        return self.result


def result(reward, turns=True, calls=1):
    turn = HarborTurn(
        turn=0,
        node_id="n0",
        prompt_token_ids=PROMPT,
        completion_token_ids=OUT,
        per_token_logps=[-0.5] * len(OUT),
        loss_mask=[0] * len(PROMPT) + [1] * len(OUT),
        trainable=True,
        tool_calls=[{"name": "bash", "arguments": '{"command": "ls"}'}] * calls,
    )
    return HarborRolloutResult(task_name="t", trial_name="r", reward=reward, turns=[turn] if turns else [])


def loop(res=None):
    loop = object.__new__(HarborRolloutLoop)
    loop._rates = defaultdict(lambda: [0.0, 0.0])
    loop.reward_funcs, loop._env_reward_types, loop.reward_func_names = [], [], ["harness_reward"]
    loop._factory = HarborSessionFactory(Runner(res), sampling={"temperature": 1.0})
    loop._stop_event, loop._live_sessions, loop._adapter = threading.Event(), set(), None
    loop._rollout_reward_fn = HarborReward(tool_efficiency_bonus=0.1, step_limit=30)
    loop._fork_threshold_tokens = 0
    return loop


def rollout(res):
    """One rollout through TRL's `_run_session`: (sequences, tool calls, reward)."""
    (_, _, sequences, calls, _, reward), _ = loop(res)._run_session(prompt_row("s", 0, "fix it")["prompt"], 0)
    return sequences, calls, reward


def score(rewards, sequences):
    n = len(rewards)
    group = RolloutGroup(
        prompts=[[{"role": "user", "content": "x"}]] * n,
        reward_kwargs={},
        completions=[[]] * n,
        completions_ids=[[]] * n,
        completions_sequences=sequences,
        tool_call_counts=CALLS[:n],
        tool_failure_counts=[0] * n,
        model_version=0,
        group_id=0,
        env_rewards=[],
        rollout_rewards=list(rewards),
    )
    return asyncio.run(loop()._score_group(group))


def row(i):
    return [TrainingSequence(PROMPT + OUT, [0, 0, 0, 1, 1, 1, 1], [0.0] * 3 + [-0.5] * 4, f"r{i}")]


def test_an_all_correct_group_is_not_ranked_by_the_bonus():
    rollouts = [rollout(result(1.0, calls=n)) for n in CALLS]
    assert [calls for _, calls, _ in rollouts] == CALLS  # TRL counted them from the capture
    samples = score([r for _, _, r in rollouts], [seq for seq, _, _ in rollouts])
    advantages = [s.advantage for s in samples]
    print(f"all-correct group, tool calls {CALLS}: advantages {np.round(advantages, 2).tolist()}")
    assert advantages == [0.0] * len(CALLS)


def test_unscorable_rollouts_train_no_rows_and_leave_the_baseline():
    good_seq, _, good = rollout(result(1.0))
    bad_seq, _, nan = rollout(result(float("nan")))
    assert nan is None and len(bad_seq) == 1
    wrong_seq, _, wrong = rollout(result(0.0))
    samples = score([good, nan, wrong], [good_seq, bad_seq, wrong_seq])
    # Passed (1 tool call of 30: bonus 0.1 x 29/30, paid: the group's verdicts differ) and failed; the NaN one
    # trains no row (main: its row trained at advantage 0, counted in the loss normaliser).
    assert [s.metrics["reward"] for s in samples] == pytest.approx([1 + 0.1 * 29 / 30, 0.0])
    assert [round(s.advantage, 4) for s in samples] == [1.0, -1.0]
    # A rollout that made no model call: no score at all (main: the verifier's 0.0 joined the baseline).
    empty_seq, _, no_call = rollout(result(0.0, turns=False))
    assert no_call is None and empty_seq == []
