"""One rule for names that become folders under the bucket (stack/names.py), and `python -m trainer.evaluation.evaluate
--name` using it: nothing is written outside <bucket>/evals, nor into evals/ itself."""

import pytest

from stack.names import problem
from trainer.evaluation import evaluate

RULE = "letters, digits, '.', '_' and '-', starting with a letter or digit, at most 128 characters (no '/', no '..')"


@pytest.mark.parametrize("name", ["../../x", "/etc", "a/b", "..", ".hidden", "-rf", "a\\b", "x" * 129])
def test_names_that_leave_their_folder(name):
    assert problem("--name", name) == f"--name={name!r} is not a usable folder name: use {RULE}"


def test_an_empty_name():
    assert problem("--name", "") == f"--name is empty: give it a name of {RULE}"


def test_a_name_that_lands_on_a_file(tmp_path):
    (tmp_path / "baseline").write_text("x")
    assert problem("--name", "baseline", tmp_path) == (
        f"--name='baseline' names {tmp_path}/baseline, which is a file, not a folder: choose another name or move "
        "that file"
    )
    (tmp_path / "run.1_a-b").mkdir()
    assert problem("--name", "run.1_a-b", tmp_path) is None


@pytest.mark.parametrize(
    ("name", "line"),
    [
        ("../../x", f"evaluate: --name='../../x' is not a usable folder name: use {RULE}"),
        ("", f"evaluate: --name is empty: give it a name of {RULE}"),
    ],
)
def test_evaluate_refuses_the_name_before_anything_runs(tmp_path, monkeypatch, capsys, name, line):
    monkeypatch.setenv("BUCKET_DIR", str(tmp_path / "bucket"))

    class NoRunner:  # the refusal comes first: nothing may be asked of the env server
        def task_rows(self):
            raise AssertionError("the evaluation ran")

    assert evaluate.main(["--name", name], runner=NoRunner()) == 2
    assert capsys.readouterr().err.strip() == line
    assert not (tmp_path / "x").exists() and not (tmp_path / "bucket").exists()
