"""Evaluation splits asked for by name: the env server names a local split by its path in its container
(`/app/datasets/starter`), a newcomer types `--split starter`.

The runner is a test double for the env server (its sandboxes need Docker): it returns OpenEnv's own
`HarborRolloutResult`, reward 1 for every attempt.
"""

from types import SimpleNamespace

import pytest
from openenv.harbor.models import HarborRolloutResult

from trainer.evaluation.evaluate import evaluate, main, resolve_splits, select_tasks
from trainer.rollouts.factory import prompt_row

STARTER, HELD = "/app/datasets/starter", "/app/datasets/held"
ROWS = [prompt_row(STARTER, i, f"task {i}", f"s{i}") for i in range(3)] + [prompt_row(HELD, 0, "held 0", "h0")]
SERVED = f"['{HELD}', '{STARTER}']"


def test_a_split_by_its_folder_name_is_the_served_path():
    assert resolve_splits(ROWS, ["starter"]) == [STARTER]
    assert resolve_splits(ROWS, ["starter/", HELD]) == [STARTER, HELD]
    assert [(ref.split, ref.index, task_id) for ref, task_id in select_tasks(ROWS, ["starter"])] == [
        (STARTER, 0, "s0"),
        (STARTER, 1, "s1"),
        (STARTER, 2, "s2"),
    ]


def test_an_unknown_split_names_what_is_served():
    with pytest.raises(ValueError) as err:
        resolve_splits(ROWS, ["nope"])
    assert str(err.value) == (
        f"evaluation split(s) ['nope'] are not served by the env server (it serves {SERVED}): add them to "
        "EVAL_DATASETS, which the env server also serves, and restart env-server"
    )


def test_a_name_two_served_splits_share_is_refused_not_guessed():
    rows = ROWS + [prompt_row("/data/starter", 0, "other", "o0")]
    with pytest.raises(ValueError) as err:
        select_tasks(rows, ["starter"])
    assert str(err.value) == (
        "evaluation split(s) ['starter'] are not served by the env server (it serves "
        "['/app/datasets/held', '/app/datasets/starter', '/data/starter']): add them to EVAL_DATASETS, which the "
        "env server also serves, and restart env-server; ['starter'] name more than one served split: give the "
        "full name"
    )
    assert [ref.split for ref, _ in select_tasks(rows, [STARTER])] == [STARTER] * 3


class Solves:
    def __init__(self):
        self.asked = []

    def evaluate(self, ref, eval_sampling):
        self.asked.append((ref.split, ref.index))
        return HarborRolloutResult(reward=1.0, rollout_type="eval")


def test_the_report_names_the_served_split_and_knows_it_was_trained_on():
    """A split asked for by name is recorded by the server's name, so held_out compares like with like: the
    starter split is also DATASETS here, so this evaluation is not held out."""
    evaluation = SimpleNamespace(
        datasets=(), max_tasks=2, attempts=1, sampling={"temperature": 0.6}, concurrency=1, pass_k=(1,)
    )
    s = SimpleNamespace(evaluation=evaluation, reward_key="", model="tiny", datasets=(STARTER,))
    runner = Solves()
    doc = evaluate(runner, ROWS, s, label="base tiny", splits=["starter"])
    assert (doc["splits"], doc["held_out"], doc["tasks"], doc["attempts"]) == ([STARTER], False, 2, 2)
    assert sorted(runner.asked) == [(STARTER, 0), (STARTER, 1)]
    held = evaluate(Solves(), ROWS, s, label="base tiny", splits=["held"])
    assert (held["splits"], held["held_out"]) == ([HELD], True)


def test_the_help_prints_the_percent_sign_once(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    out = capsys.readouterr().out
    assert done.value.code == 0
    assert "(pass@k with a 95% CI)" in " ".join(out.split()) and "%%" not in out
