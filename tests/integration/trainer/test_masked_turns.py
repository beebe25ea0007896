"""A turn masked out on ingest never trains against logprob 0.0, through TRL's own ingest path.

OpenEnv zero-fills the logprobs of a turn whose logprobs were rejected on ingest and masks it
(trainable=False). This feeds such a rollout through our session, then TRL 1.16.0's
`_turns_from_training_trace` and `_chain_to_sequences` (what the harness worker does), and checks that
every position TRL would put in the loss (completion_mask == 1) carries a real sampled logprob.
Runs in the trainer image (TRL): tests/run-in-image trainer tests/integration/trainer
"""

import pytest

# No importorskip: the trainer image has TRL, and a broken install there must fail this suite, not skip it.
from openenv.harbor.models import HarborRolloutResult, HarborTurn
from trl.experimental.async_grpo.async_rollout_worker import _chain_to_sequences
from trl.experimental.async_grpo.openenv_harness import _turns_from_training_trace

from trainer.rollouts.factory import HarborSessionFactory, prompt_row

P1, O1 = [1, 2, 3], [4, 5, 6, 7]
P2 = P1 + O1 + [8]
O2 = [9, 10, 11, 12]
P3 = P2 + O2 + [13]
O3 = [14, 15, 16, 17]


def turn(i, prompt, out, logps, trainable=True):
    return HarborTurn(
        turn=i,
        node_id=f"n{i}",
        prompt_token_ids=prompt,
        completion_token_ids=out,
        per_token_logps=logps,
        loss_mask=[0] * len(prompt) + [int(trainable)] * len(out),
        trainable=trainable,
    )


class Fixed:
    def __init__(self, result):
        self.result = result

    def run(self, ref, sampling, episode_id):
        return self.result


@pytest.mark.parametrize("trainable_flag", [False, True])
def test_masked_turn_positions_never_enter_the_loss(trainable_flag):
    # trainable_flag=True is the lost-mask case: zero-filled logprobs that still claim supervision.
    result = HarborRolloutResult(
        reward=1.0,
        turns=[
            turn(0, P1, O1, [-0.5] * 4),
            turn(1, P2, O2, [0.0] * 4, trainable=trainable_flag),
            turn(2, P3, O3, [-0.25] * 4),
        ],
    )
    session = HarborSessionFactory(Fixed(result)).create(prompt_row("s", 0, "x")["prompt"])
    session.wait_for_completion()
    turns = _turns_from_training_trace(session.fetch_training_trace())
    sequences, tally = _chain_to_sequences(turns, "r1", 0)
    assert len(sequences) == 1 and tally["fork"] == 0  # one row for the whole multi-turn rollout
    row = sequences[0]
    trained = [(tok, lp) for tok, m, lp in zip(row.input_ids, row.completion_mask, row.old_log_probs) if m]
    assert [tok for tok, _ in trained] == O1 + O3
    assert all(lp != 0.0 for _, lp in trained)
