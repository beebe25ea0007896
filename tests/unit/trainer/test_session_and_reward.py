"""The session factory, reward and run-name logic, against OpenEnv's real contract (host venv, no TRL).

HarborRolloutResult documents are built the way the env server builds them: OpenEnv's
`turns_from_document` over a capture document, so masks and logprobs take OpenEnv's own path.
"""

import pickle
import re
from types import SimpleNamespace

import numpy as np
import pytest
from openenv.harbor.models import HarborRolloutResult, HarborTurn

from stack.readers import trainer as config
from trainer.rollouts import group_metrics
from trainer.rollouts import reward as reward_mod
from trainer.rollouts.factory import HarborSessionFactory, TaskRef, prompt_row, task_ref_from_prompt
from trainer.rollouts.reward import HarborReward, RewardKeyMissing, base_reward
from trainer.rollouts.session import RolloutFailed, mask_zero_filled

PROMPT1, OUT1 = [1, 2, 3], [4, 5, 6, 7]
PROMPT2 = PROMPT1 + OUT1 + [8, 9]
OUT2 = [10, 11, 12, 13]


def turn(i, prompt, out, logps=None, trainable=True, mask=None):
    logps = logps if logps is not None else [-0.5] * len(out)
    return HarborTurn(
        turn=i,
        node_id=f"n{i}",
        prompt_token_ids=prompt,
        completion_token_ids=out,
        per_token_logps=logps,
        loss_mask=mask if mask is not None else [0] * len(prompt) + [int(trainable)] * len(out),
        trainable=trainable,
        request_messages=[{"role": "user", "content": "fix it"}],
        text="ok",
        tool_calls=[{"name": "bash", "arguments": '{"command": "ls"}'}],
    )


def result(**over):
    base = dict(task_name="hello", trial_name="t1", reward=1.0, turns=[turn(0, PROMPT1, OUT1), turn(1, PROMPT2, OUT2)])
    base.update(over)
    return HarborRolloutResult(**base)


class FixedRunner:
    def __init__(self, res):
        self.res, self.calls = res, []

    def run(self, ref, sampling, episode_id):
        self.calls.append((ref, sampling, episode_id))
        return self.res


def session_for(res, reward_key=""):
    factory = HarborSessionFactory(FixedRunner(res), reward_key=reward_key, sampling={"temperature": 1.0})
    return factory.create(prompt_row("starter", 3, "fix it")["prompt"], seed=7, episode_id="e1"), factory


def test_group_gets_the_same_task_and_the_policy_travels():
    row = prompt_row("starter", 3, "fix it", "task-3")
    assert task_ref_from_prompt(row["prompt"]) == TaskRef("starter", 3, "fix it")
    session, factory = session_for(result())
    session.wait_for_completion()
    ref, sampling, episode = factory.runner.calls[0]
    assert (ref.index, ref.split, sampling, episode) == (3, "starter", {"temperature": 1.0}, "e1")


def test_prompt_without_task_is_refused():
    with pytest.raises(ValueError, match="task_rows"):
        task_ref_from_prompt([{"role": "user", "content": "x"}])


def test_trace_comes_from_the_contract():
    session, _ = session_for(result())
    assert session.wait_for_completion() == 0
    trace = session.fetch_training_trace()
    assert [t.prompt_token_ids for t in trace.turns] == [PROMPT1, PROMPT2]
    assert session.verify([]).env_reward == 1.0


def test_missing_prompt_token_ids_stop_the_run_naming_the_flags():
    session, _ = session_for(result(turns=[turn(0, [], OUT1, mask=[1] * 4)]))
    session.wait_for_completion()
    with pytest.raises(ValueError, match="--return-tokens-as-token-ids and --logprobs-mode processed_logprobs"):
        session.fetch_training_trace()


def test_eval_grade_engine_stops_the_run_naming_the_flags():
    session, _ = session_for(result(rollout_type="eval", capture_level="text"))
    session.wait_for_completion()
    with pytest.raises(ValueError, match="--return-tokens-as-token-ids"):
        session.fetch_training_trace()


def test_failed_sandbox_is_unscorable_not_zero():
    session, _ = session_for(
        result(ok=False, reward=None, error="sandbox died", exception_type="SandboxError", turns=[])
    )
    with pytest.raises(RolloutFailed, match="sandbox died"):
        session.wait_for_completion()


def test_timeout_with_a_grade_is_flagged_and_still_trained():
    session, _ = session_for(result(ok=False, reward=0.0, exception_type="AgentTimeoutError", error="900s"))
    with pytest.raises(TimeoutError):
        session.wait_for_completion()
    assert len(session.fetch_training_trace().turns) == 2
    assert session.verify([]).env_reward == 0.0


def test_turn_masked_on_ingest_stays_context():
    # Ingest rejected turn 1's logprobs: OpenEnv zero-fills them and masks the turn (trainable=False).
    res = result(turns=[turn(0, PROMPT1, OUT1), turn(1, PROMPT2, OUT2, logps=[0.0] * 4, trainable=False)])
    session, _ = session_for(res)
    session.wait_for_completion()
    trace = session.fetch_training_trace()
    assert trace.turns[1].loss_mask == [0] * (len(PROMPT2) + len(OUT2))


def test_zero_filled_logprobs_with_a_lost_mask_are_masked():
    res = result(turns=[turn(0, PROMPT1, OUT1), turn(1, PROMPT2, OUT2, logps=[0.0] * 4)])
    session, _ = session_for(res)
    session.wait_for_completion()
    trace = session.fetch_training_trace()
    assert session.masked_zero_filled == 1
    assert not any(trace.turns[1].loss_mask) and any(trace.turns[0].loss_mask)


def test_a_single_certain_token_is_not_mistaken_for_zero_fill():
    from openenv.harbor.contract import to_training_trace

    trace = to_training_trace(result(turns=[turn(0, PROMPT1, [4], logps=[0.0])]))
    assert mask_zero_filled(trace)[1] == 0


def test_reward_key_selects_a_component():
    assert base_reward(1.0, {"tests": 0.5, "style": 1.0}, "tests") == 0.5
    assert base_reward(None, {}, "tests") is None
    with pytest.raises(RewardKeyMissing, match="REWARD_KEY=tests is not among"):
        base_reward(1.0, {"style": 1.0}, "tests")


def scored(reward_fn, base, calls, verdict):
    """What TRL's `_run_session` does: the session's verify() (here: its verdict) then the reward function."""
    reward_mod.note_verdict(verdict)
    return reward_fn(SimpleNamespace(env_reward=base, tool_call_count=calls))


def test_tool_efficiency_bonus_only_on_a_passed_verdict():
    reward = HarborReward(tool_efficiency_bonus=0.1, step_limit=10)
    assert scored(reward, 1.0, 2, True) == pytest.approx(1.08)
    assert scored(reward, 1.0, 12, True) == 1.0  # over budget: no bonus, never a penalty
    assert scored(reward, 0.0, 1, False) == 0.0  # wrong and brief earns nothing
    assert scored(reward, 1.0, 1, False) == 1.0  # a partial-credit key at 1.0 whose suite verdict is "failed"
    assert scored(reward, 1.0, 1, None) == 1.0  # no verdict to read: no bonus
    assert scored(reward, None, 1, True) is None  # unscorable stays None, never 0
    assert scored(reward, float("nan"), 1, True) is None
    assert reward(SimpleNamespace(env_reward=1.0, tool_call_count=1)) == 1.0  # a verdict is used once


def test_the_verdict_is_the_suites_pass_fail_not_the_reward_key():
    assert reward_mod.passed(1.0, {}) is True and reward_mod.passed(0.0, {}) is False
    assert reward_mod.passed(1.0, {"passed": 0.0, "tests": 1.0}) is False  # the suite's explicit component wins
    assert reward_mod.passed(0.6, {}) is None  # a partial score is not a verdict
    assert reward_mod.passed(None, {"tests": 1.0}) is None
    session, _ = session_for(result(reward=1.0, rewards={"tests": 0.4}), reward_key="tests")
    session.wait_for_completion()
    assert session.verify([]).env_reward == 0.4 and reward_mod.take_verdict() is True


def trl_advantages(rewards):
    """TRL 1.16.0 `_score_group`'s normalisation over the scored rollouts: (r - mean) / (std + 1e-8)."""
    values = np.array(rewards, dtype=float)
    return (values - values.mean()) / (values.std() + 1e-8)


def test_an_all_correct_group_gets_no_bonus_spread_and_a_mixed_group_keeps_correct_above_wrong():
    reward = HarborReward(tool_efficiency_bonus=0.1, step_limit=30)
    calls = [3, 5, 8, 10, 12, 15, 20, 29]  # the group: advantages +1.22 .. -2.04 on main
    per_rollout = [scored(reward, 1.0, n, True) for n in calls]
    before = trl_advantages([float(r) for r in per_rollout])  # what main handed TRL: base + bonus
    after = trl_advantages(reward_mod.group_rewards(per_rollout))
    print(f"all-correct group, tool calls {calls}: advantages {np.round(before, 2)} -> {np.round(after, 2)}")
    assert round(before[0], 2) == 1.22 and round(before[-1], 2) == -2.04
    assert np.all(after == 0.0)
    # Mixed: 4 passed (3..29 calls), 4 failed. Every passed rollout stays above every failed one; the bonus only
    # orders the passed ones, by at most 0.1 / std of the group in advantage.
    mixed = [scored(reward, 1.0, n, True) for n in (3, 10, 15, 29)] + [scored(reward, 0.0, n, False) for n in calls[:4]]
    adv = trl_advantages(reward_mod.group_rewards(mixed))
    assert adv[:4].min() > adv[4:].max()
    assert adv[0] > adv[3]  # the brief correct solution ranks above the long one
    assert adv[:4].max() - adv[:4].min() <= 0.1 * (1 - 3 / 30) / np.std(reward_mod.group_rewards(mixed)) + 1e-9
    assert reward_mod.group_rewards([None, per_rollout[0]]) == [None, 1.0]


def test_unreadable_rewards_and_rollouts_with_no_model_call_are_unscorable():
    for bad in (float("nan"), float("inf")):
        session, _ = session_for(result(reward=bad))
        session.wait_for_completion()
        assert session.verify([]).env_reward is None
    # A rollout that failed before its first model call: the verifier's 0 is not the policy's doing.
    session, _ = session_for(result(reward=0.0, turns=[]))
    session.wait_for_completion()
    assert session.verify([]).env_reward is None and reward_mod.take_verdict() is None


def test_rows_of_unscorable_rollouts_are_not_trained():
    rows = [SimpleNamespace(metrics={"reward": r}) for r in (1.0, float("nan"), 0.0, float("nan"))]
    kept = group_metrics.scorable_rows(rows)
    assert [r.metrics["reward"] for r in kept] == [1.0, 0.0]


def test_what_the_worker_sends_to_its_child_pickles():
    import functools

    from trainer.rollouts.factory import EnvServerRunner

    runner = EnvServerRunner("http://127.0.0.1:8000", "mini-swe-agent", "e2b", "http://127.0.0.1:8001/v1", "m", 12, 900)
    factory = functools.partial(HarborSessionFactory, runner=runner, reward_key="")
    restored = pickle.loads(pickle.dumps((factory, HarborReward(0.1, 12))))
    assert restored[0](sampling={"temperature": 1.0}).runner == runner


def test_fresh_run_names_never_collide_or_fall_back():
    names = {config.fresh_run_name("Qwen/Qwen3-1.7B", "mini-swe-agent", 200, now=0) for _ in range(20)}
    assert len(names) == 20
    assert re.fullmatch(r"qwen3-1\.7b-mini-swe-agent-200steps-19700101T000000Z-[0-9a-f]{6}", names.pop())


def test_explicit_run_name_resumes_from_latest_complete_checkpoint(tmp_path):
    env = {"RUN_NAME": "my-run", "BUCKET_DIR": str(tmp_path), "AGENT_STEP_LIMIT": ""}
    s = config.from_env(env)
    assert s.agent_step_limit == 12 and s.run_dir == tmp_path / "checkpoints" / "my-run"
    assert s.resume_from() is None
    for step, complete in ((2, True), (10, True), (12, False)):
        d = s.run_dir / f"checkpoint-{step}"
        d.mkdir(parents=True)
        if complete:  # what stack/resume.py asks of a checkpoint (tests/unit/stack/test_resume_pick.py)
            header = b'{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
            (d / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header + b"\0" * 4)
            (d / "trainer_state.json").write_text(f'{{"global_step": {step}}}')
    assert s.resume_from().name == "checkpoint-10"
    fresh = config.from_env({"BUCKET_DIR": str(tmp_path)})
    assert fresh.resume_from() is None and fresh.run_name != "my-run"


def test_zero_step_limit_is_refused():
    with pytest.raises(ValueError, match="unbounded"):
        config.from_env({"AGENT_STEP_LIMIT": "0"})
