"""Dropped-reply retries told apart from forks on token ids (trainer/rollouts/retries.py), and the figures they feed.

ChatML-like ids: [START, role, NL, content..., END, NL] per message, GEN the generation prompt. TRL's reconciler
and metric push are driven end to end in tests/integration/trainer/test_retries_through_trl.py.
"""

from collections import defaultdict
from types import SimpleNamespace

from stackstatus import figures
from trainer.rollouts import group_metrics, retries
from trainer.watch.status import status_fields

START, ASSISTANT, USER, NL, END = 100, 101, 102, 103, 104
GEN = [START, ASSISTANT, NL]


def msg(role, *content):
    return [START, role, NL, *content, END, NL]


SYS, TASK, ERROR = msg(200, 1, 2), msg(USER, 10, 11, 12), msg(USER, 30, 31)
P1, O1 = SYS + TASK + GEN, [20, 21, END]


def turn(prompt, output=(22, END)):
    return SimpleNamespace(prompt_ids=prompt, output_ids=list(output))


def test_the_reply_dropped_and_a_message_appended_is_a_retry():
    assert retries.is_retry(P1, O1, SYS + TASK + ERROR + GEN) is True
    # Two format errors in a row: each resends the last prompt's conversation plus one more error.
    turns = [turn(P1, O1), turn(SYS + TASK + ERROR + GEN), turn(SYS + TASK + ERROR + ERROR + GEN)]
    assert retries.count(turns) == 2


def test_anything_else_is_not_a_retry():
    # An earlier message changed (the system prompt): a re-rendered history.
    assert retries.is_retry(P1, O1, msg(200, 1, 9) + TASK + ERROR + GEN) is False
    # The reply kept: a clean extension is no retry (and no fork).
    assert retries.is_retry(P1, O1, P1 + O1 + [NL] + ERROR + GEN) is False
    # The whole previous prompt kept, the reply re-rendered after it (Qwen3 dropping the reply's thinking).
    assert retries.is_retry(P1, [60, 61, 20, 21, END], P1 + [20, 21, END, NL] + ERROR + GEN) is False
    # The reply re-rendered inside a generation prompt its history header lacks (Qwen3, thinking off).
    gen = [START, ASSISTANT, NL, 50, 51, 52, 51]
    assert (
        retries.is_retry(SYS + TASK + gen, O1, SYS + TASK + [START, ASSISTANT, NL] + O1 + [NL] + ERROR + gen) is False
    )
    # Not closed by the generation prompt it dropped.
    assert retries.is_retry(P1, O1, SYS + TASK + ERROR) is False
    # A divergence deeper than a generation prompt lies in history: a message inserted before the last one (of 20
    # tokens), the reply dropped.
    last = msg(USER, *range(300, 320))
    assert retries.is_retry(SYS + last + GEN, O1, SYS + ERROR + last + GEN) is False
    assert retries.count([turn(P1, O1)]) == 0


def test_split_moves_retries_out_of_the_forks():
    tally = {"clean": 1.0, "realign": 0.0, "fork": 2.0, "transitions": 3.0, "drift_tokens": 9.0, "drift_max": 5.0}
    assert retries.split(tally, 1) == {**tally, "fork": 1.0, "retry": 1.0}


def window(rates):
    return {key: num / den for key, (num, den) in rates.items()}


def test_retry_frac_over_multi_turn_rollouts_and_retries_are_not_forked_rollouts():
    rates = defaultdict(lambda: [0.0, 0.0])
    retried = {"clean": 1.0, "realign": 0.0, "fork": 0.0, "retry": 1.0, "transitions": 2.0}
    forked = {"clean": 1.0, "realign": 0.0, "fork": 1.0, "retry": 0.0, "transitions": 2.0}
    # A retry trains two rows, which alone no longer reads as forked once the tally says otherwise.
    group_metrics.add_rollout(rates, sequences=2, loop_exhausted=False, tally=retried)
    group_metrics.add_rollout(rates, sequences=2, loop_exhausted=False, tally=forked)
    group_metrics.add_rollout(rates, sequences=1, loop_exhausted=False, tally={**forked, "fork": 0.0, "clean": 2.0})
    group_metrics.add_rollout(rates, sequences=1, loop_exhausted=False, tally={"fork": 0.0, "transitions": 0.0})
    assert window(rates) == {
        "harbor/timeout_frac": 0.0,
        "harbor/forked_rollout_frac": 0.25,
        "rollout/retry_frac": 1 / 3,
    }


def test_retry_frac_reaches_status_json_and_the_status_figure():
    assert status_fields({"rollout/retry_frac": 0.25, "rollout/fork_frac": 0.0}) == {
        "fork_frac": 0.0,
        "retry_frac": 0.25,
    }
    assert figures.forking({"fork_frac": 0.0, "forked_rollout_frac": 0.0, "retry_frac": 0.25}) == (
        "forked 0% of turn transitions, 0% of rollouts; 25% of multi-turn rollouts retried a rejected reply"
    )
    # A status.json from before the figure existed: the line as it was.
    assert figures.forking({"fork_frac": 0.0, "forked_rollout_frac": 0.0}) == (
        "forked 0% of turn transitions, 0% of rollouts"
    )
