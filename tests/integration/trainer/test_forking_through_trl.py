"""The forking tell through TRL 1.16.0's own reconciler: a rollout whose every turn re-rendered its conversation
start trains one row per turn (one row only, when its earlier turns train nothing), and the worker's
`harbor/forked_rollout_frac` reads 1.0 either way; one whose prompts extend
the last reply trains one row and reads 0.0.

The rollout goes through our session (OpenEnv's trace) and TRL's `_turns_from_training_trace` and
`_chain_to_sequences`, what the harness worker does per rollout; the row count is what TRL hands
`_push_rollout_metrics` as `sequences`. Runs in the trainer image (TRL): tests/run-in-image trainer tests/integration/trainer
"""

from collections import defaultdict

import pytest
from openenv.harbor.models import HarborRolloutResult, HarborTurn
from trl.experimental.async_grpo.async_rollout_worker import _chain_to_sequences
from trl.experimental.async_grpo.openenv_harness import _turns_from_training_trace

from trainer.rollouts import group_metrics
from trainer.rollouts.factory import HarborSessionFactory, prompt_row

P1, O1 = [1, 2, 3], [4, 5, 6, 7]
O2, O3 = [9, 10, 11, 12], [14, 15, 16, 17]
EXTENDING = [P1, P1 + O1 + [8], P1 + O1 + [8] + O2 + [13]]
# The first token re-rendered on every turn (a template that renders history differently): the drift lies
# before the last reply, so TRL forks rather than realigns.
RE_RENDERED = [P1, [99, 2, 3] + O1 + [8], [98, 2, 3] + O1 + [8] + O2 + [13]]


class Fixed:
    def __init__(self, result):
        self.result = result

    def run(self, ref, sampling, episode_id):
        return self.result


def rows(prompts, trained=(True, True, True)):
    turns = [
        HarborTurn(
            turn=i,
            node_id=f"n{i}",
            prompt_token_ids=prompt,
            completion_token_ids=out,
            per_token_logps=[-0.5] * len(out),
            loss_mask=[0] * len(prompt) + [int(train)] * len(out),
            trainable=train,
        )
        for i, (prompt, out, train) in enumerate(zip(prompts, [O1, O2, O3], trained))
    ]
    session = HarborSessionFactory(Fixed(HarborRolloutResult(reward=1.0, turns=turns))).create(
        prompt_row("s", 0, "x")["prompt"]
    )
    session.wait_for_completion()
    return _chain_to_sequences(_turns_from_training_trace(session.fetch_training_trace()), "r1", 0)


@pytest.mark.parametrize(("prompts", "n_rows", "forks", "forked"), [(EXTENDING, 1, 0, 0.0), (RE_RENDERED, 3, 2, 1.0)])
def test_rows_per_rollout_and_the_forked_figure(prompts, n_rows, forks, forked):
    sequences, tally = rows(prompts)
    assert (len(sequences), tally["fork"], tally["transitions"]) == (n_rows, forks, 2)
    rates = defaultdict(lambda: [0.0, 0.0])
    group_metrics.add_rollout(rates, sequences=len(sequences), loop_exhausted=False, tally=tally)
    num, den = rates["harbor/forked_rollout_frac"]
    assert num / den == forked
    # Every sampled token trains exactly once, in whichever row holds it.
    trained = [tok for row in sequences for tok, m in zip(row.input_ids, row.completion_mask) if m]
    assert trained == O1 + O2 + O3


def test_a_re_rendered_rollout_whose_earlier_turns_train_nothing_is_still_forked():
    """TRL keeps only rows with a trained token: with the first two turns masked (as ingest masks a turn it
    cannot trust), a fully re-rendered rollout comes back as ONE row. Rows per rollout read 0.0 here; the
    figure reads TRL's tally and must be 1.0."""
    sequences, tally = rows(RE_RENDERED, trained=[False, False, True])
    assert (len(sequences), tally["fork"]) == (1, 2)
    rates = defaultdict(lambda: [0.0, 0.0])
    group_metrics.add_rollout(rates, sequences=len(sequences), loop_exhausted=False, tally=tally)
    num, den = rates["harbor/forked_rollout_frac"]
    assert num / den == 1.0
