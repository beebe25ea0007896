"""The learnable policy fitted into the mock-engine-learn image (mock_engine.build_policy, by
images/pick-policy/Dockerfile): sampled the way the CPU form serves it (the mock's own TinyLM, temperature 1.0, nothing scripted), it must emit valid agent actions
that spread over the four letters, so a group has reward spread that learning can use, and the engine probe
must be able to grade it. Bounds are set from measurements (the builder's own run, held-out, 96 rollouts:
valid 0.948, letters A .229 B .260 C .219 D .240, probe gap 5.37; this image build, these 48 draws: valid
0.875, letters A .250 B .167 C .208 D .250, gap 5.006 at T=1 and 2.503 at T=2), with room for 48 samples'
noise and for a build on another CPU drawing slightly different weights: at n=48 a rate of 0.22 has a 95%
interval of about [0.12, 0.36]."""

from __future__ import annotations

from pathlib import Path

import pytest

POLICY = Path("/app/models/pick-policy")
HELDOUT = Path(__file__).resolve().parents[3] / "datasets/pick-answer/heldout"


@pytest.fixture(scope="module")
def lm():
    if not POLICY.is_dir():
        pytest.fail(f"{POLICY} is missing: run this suite in the mock-engine-learn image (build-cpu-images --learn)")
    import torch

    from mock_engine.lm import TinyLM

    torch.set_num_threads(2)
    return TinyLM(str(POLICY), 32768, 256)


def test_its_own_samples_are_valid_actions_over_all_four_letters(lm):
    from mock_engine.build_policy import host_uname, read_tasks
    from mock_engine.policy_eval import rollout, sample_tasks, summarize

    # Half with random unames, half with this machine's own, which every local sandbox reports (a policy
    # fitted without it wrote no valid action under the CPU form's real sandboxes: build_policy.host_uname).
    tasks = read_tasks(HELDOUT)
    halves = [sample_tasks(tasks, 24, seed=1), sample_tasks(tasks, 24, seed=2, uname=host_uname())]
    rollouts = [[rollout(lm, task, uname, seed) for task, uname, seed in draws] for draws in halves]
    assert summarize(rollouts[1])["valid"] >= 0.7, summarize(rollouts[1])
    summary = summarize(rollouts[0] + rollouts[1])
    assert summary["valid"] >= 0.7, summary
    # Every letter is chosen sometimes (no letter above half): the rewarded one is not already learned.
    assert all(0.05 <= rate <= 0.5 for rate in summary["letter_rate"].values()), summary
    assert 0.05 <= summary["pass"] <= 0.45, summary


def test_the_engine_probe_can_grade_it(lm):
    from mock_engine.policy_eval import probe_gaps

    at_1, at_2 = probe_gaps(lm)
    # services/stack/serving/probe.py needs a top-two gap >= 0.5 at T=1 that halves at T=2 (processed logprobs).
    assert at_1 >= 1.0 and at_2 == pytest.approx(at_1 / 2, rel=0.01), (at_1, at_2)
