"""A dropped-reply retry through TRL 1.16.0's reconciler and metrics: counted as a retry, not a fork, and the forking
stop rule does not fire; a prompt that changes an earlier message still forks and fires it.

mini-swe-agent 2.4.6 on a format error resends the conversation without the rejected reply, plus its error message
as a user message (trainer/rollouts/retries.py cites the source). The captured turns below have that shape in ChatML-like ids.
Each goes through our session (OpenEnv's trace), TRL's `_turns_from_training_trace`, the reconciler the harness loop
calls (`openenv_harness._chain_to_sequences`, as trainer/rollouts/worker.py sets it), our loop's `_push_rollout_metrics` (TRL's
own, which computes `rollout/fork_frac`, plus ours) and the stop rules at their default threshold over one step.
Runs in the trainer image (TRL): tests/run-in-image trainer tests/integration/trainer
"""

import queue
from collections import defaultdict
from types import SimpleNamespace

from openenv.harbor.models import HarborRolloutResult, HarborTurn
from trl.experimental.async_grpo import openenv_harness
from trl.experimental.async_grpo.async_rollout_worker import TurnRecord
from trl.experimental.async_grpo.openenv_harness import _turns_from_training_trace

from stack.readers.stop_rules import FIELDS as STOP_FIELDS
from trainer.rollouts.factory import HarborSessionFactory, prompt_row
from trainer.rollouts.worker import HarborRolloutLoop
from trainer.watch import stop_rules

START, ASSISTANT, USER, NL, END = 100, 101, 102, 103, 104
GEN = [START, ASSISTANT, NL]  # the generation prompt


def msg(role, *content):
    return [START, role, NL, *content, END, NL]


SYS, TASK = msg(200, 1, 2), msg(USER, 10, 11, 12)
ERROR, OBS = msg(USER, 30, 31), msg(USER, 40, 41)  # the format-error message; a command's output
O1, O2, O3 = [20, 21, END], [22, 23, END], [24, END]  # O1 holds no action: the agent rejects it
P1 = SYS + TASK + GEN
# Turn 2 resends turn 1's conversation without O1, plus the error: turn 1's prompt less its generation prompt.
RETRY_P2 = SYS + TASK + ERROR + GEN
# Turn 2 changes an earlier message (the system prompt) instead: a re-rendered history.
FORK_P2 = msg(200, 1, 9) + TASK + ERROR + GEN


class Fixed:
    def __init__(self, result):
        self.result = result

    def run(self, ref, sampling, episode_id):
        return self.result


def rollout(p2):
    """Three captured turns; turn 3 extends turn 2's reply with a command's output (clean)."""
    prompts = [P1, p2, p2 + O2 + [NL] + OBS + GEN]
    turns = [
        HarborTurn(
            turn=i,
            node_id=f"n{i}",
            prompt_token_ids=prompt,
            completion_token_ids=out,
            per_token_logps=[-0.5] * len(out),
            loss_mask=[0] * len(prompt) + [1] * len(out),
        )
        for i, (prompt, out) in enumerate(zip(prompts, [O1, O2, O3]))
    ]
    session = HarborSessionFactory(Fixed(HarborRolloutResult(reward=1.0, turns=turns))).create(
        prompt_row("s", 0, "x")["prompt"]
    )
    session.wait_for_completion()
    return _turns_from_training_trace(session.fetch_training_trace())


def logged(turns):
    """What one step logs for this rollout: the reconciler the harness loop calls, then our loop's metrics push
    (TRL's, which computes fork_frac from the tally, with ours first), read back as TRL ships them (num/den)."""
    sequences, tally = openenv_harness._chain_to_sequences(turns, "r1", 0)
    loop = object.__new__(HarborRolloutLoop)
    loop._rates, loop._counters, loop._metrics_queue = defaultdict(lambda: [0.0, 0.0]), {}, queue.Queue()
    loop.eos_token_ids, loop.tokenizer, loop.tools = (END,), SimpleNamespace(pad_token_id=0), None
    loop._push_rollout_metrics(
        turns=len(turns),
        sequences=len(sequences),
        completion_ids=[t for turn in turns for t in turn.output_ids],
        tally=tally,
        loop_exhausted=False,
        duration_s=1.0,
    )
    payload = loop._metrics_queue.get_nowait()
    logs = {k: v[0] / v[1] for k, v in payload.items() if isinstance(v, tuple)}
    return sequences, tally, logs


def forking_rule():
    return stop_rules.StopRules({"STOP_FORKING_FRAC": float(STOP_FIELDS["STOP_FORKING_FRAC"].default)}, 1)


def test_a_dropped_reply_retry_is_a_retry_not_a_fork_and_the_rule_does_not_fire():
    sequences, tally, logs = logged(rollout(RETRY_P2))
    assert (tally["fork"], tally["retry"], tally["clean"], tally["transitions"]) == (0.0, 1.0, 1.0, 2.0)
    assert (logs["rollout/fork_frac"], logs["rollout/retry_frac"], logs["harbor/forked_rollout_frac"]) == (
        0.0,
        1.0,
        0.0,
    )
    assert forking_rule().observe(1, logs) is None
    # Training is TRL's, unchanged: the rejected reply in its own row, then the retried conversation; every
    # sampled token trains once.
    assert [row.input_ids for row in sequences] == [P1 + O1, RETRY_P2 + O2 + [NL] + OBS + GEN + O3]
    trained = [tok for row in sequences for tok, m in zip(row.input_ids, row.completion_mask) if m]
    assert trained == O1 + O2 + O3


def test_a_changed_earlier_message_is_a_fork_and_the_rule_fires():
    sequences, tally, logs = logged(rollout(FORK_P2))
    assert (tally["fork"], tally["retry"], tally["clean"], tally["transitions"]) == (1.0, 0.0, 1.0, 2.0)
    assert (logs["rollout/fork_frac"], logs["rollout/retry_frac"], logs["harbor/forked_rollout_frac"]) == (
        0.5,
        0.0,
        1.0,
    )
    tripped = forking_rule().observe(1, logs)
    assert (tripped.rule.name, tripped.mean, tripped.window) == ("STOP_FORKING_FRAC", 0.5, (0.5,))
    trained = [tok for row in sequences for tok, m in zip(row.input_ids, row.completion_mask) if m]
    assert (len(sequences), trained) == (2, O1 + O2 + O3)


def test_a_reply_re_rendered_inside_the_generation_prompt_is_a_fork():
    """Qwen3 with thinking off: the generation prompt carries an empty think block that history does not, so the
    re-rendered reply diverges inside the generation prompt, and the prompt ends with the same dropped tail. The
    reply's body in what was inserted is what keeps it a fork."""
    gen = [START, ASSISTANT, NL, 50, 51, 52, 51]  # assistant\n<think>\n\n</think>\n\n
    p1 = SYS + TASK + gen
    p2 = SYS + TASK + [START, ASSISTANT, NL] + O1 + [NL] + OBS + gen
    turns = [TurnRecord(p1, O1, [-0.5] * len(O1)), TurnRecord(p2, O2, [-0.5] * len(O2))]
    _, tally, logs = logged(turns)
    assert (tally["fork"], tally["retry"], logs["rollout/fork_frac"], logs["rollout/retry_frac"]) == (
        1.0,
        0.0,
        1.0,
        0.0,
    )
