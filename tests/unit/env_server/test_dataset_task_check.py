"""The dataset check env-server starts with (stack/datasets.py through env_server.checks.check_datasets): each bad
task is refused in one line naming it and the fix, or (DATASET_BAD_TASKS=skip) left out of what OpenEnv serves and
counted; and the Task API shows the same instruction the agent gets."""

import shutil
from pathlib import Path

import pytest
from openenv.harbor import tasks as openenv_tasks

from env_server import task_preview
from env_server.checks import EnvError, check_datasets

STARTER = Path(__file__).resolve().parents[3] / "datasets" / "starter"
HINT = "(or set DATASET_BAD_TASKS=skip to serve the others)"


@pytest.fixture
def dataset(tmp_path):
    """A copy of the starter set (three real Harbor tasks) in a fresh folder, OpenEnv's cache cleared after."""
    root = tmp_path / "ds"
    shutil.copytree(STARTER, root)
    yield root
    openenv_tasks._CACHE.pop(str(root), None)


def refused(root) -> str:
    with pytest.raises(EnvError) as err:
        check_datasets((str(root),))
    return str(err.value)


def test_the_starter_set_passes(dataset):
    [status] = check_datasets((str(dataset),))
    assert (status.num_tasks, status.skipped) == (3, ())
    assert status.line() == f"dataset   {dataset}: 3 tasks"


def test_a_task_without_task_toml(dataset):
    (dataset / "count-lines" / "task.toml").unlink()
    assert refused(dataset) == (
        f"DATASETS {str(dataset)!r} task 'count-lines': task.toml is missing: add the task's task.toml, or remove "
        f"the folder {HINT}"
    )


def test_a_task_toml_that_does_not_parse(dataset):
    (dataset / "sum-numbers" / "task.toml").write_text("[agent\ntimeout_sec = 1\n")
    assert refused(dataset).startswith(
        f"DATASETS {str(dataset)!r} task 'sum-numbers': task.toml does not parse (Expected ']' at the end of a "
        "table declaration (at line 1, column 7)): fix its TOML"
    )


@pytest.mark.parametrize(
    ("section", "key", "value", "shown"),
    [
        ("agent", "timeout_sec", "-5.0", "-5.0"),
        ("verifier", "timeout_sec", "0", "0"),
        ("agent", "timeout_sec", '"x"', "'x'"),
    ],
)
def test_timeouts_that_are_not_positive(dataset, section, key, value, shown):
    toml = dataset / "write-greeting" / "task.toml"
    text = toml.read_text()
    old = f"[{section}]\ntimeout_sec = "
    start = text.index(old) + len(old)
    toml.write_text(text[:start] + value + text[text.index("\n", start) :])
    assert refused(dataset) == (
        f"DATASETS {str(dataset)!r} task 'write-greeting': [{section}] {key} = {shown} in task.toml is not a "
        f"positive number of seconds: give it a positive number of seconds, e.g. 600.0 {HINT}"
    )


def test_a_task_without_its_verifier(dataset):
    shutil.rmtree(dataset / "count-lines" / "tests")
    assert refused(dataset) == (
        f"DATASETS {str(dataset)!r} task 'count-lines': tests/test.sh is missing, so nothing can score it: add the "
        f"task's verifier script at tests/test.sh {HINT}"
    )


def test_a_link_out_of_the_dataset(dataset):
    (dataset / "count-lines" / "environment" / "data.txt").unlink()
    (dataset / "count-lines" / "environment" / "data.txt").symlink_to("/etc/passwd")
    assert refused(dataset) == (
        f"DATASETS {str(dataset)!r} task 'count-lines': environment/data.txt is a link to /etc/passwd, outside the "
        f"dataset: replace the link with the file itself {HINT}"
    )


def test_a_task_folder_that_is_a_link_out(dataset, tmp_path):
    outside = tmp_path / "elsewhere"
    shutil.copytree(dataset / "sum-numbers", outside)
    (dataset / "zz-linked").symlink_to(outside)
    assert refused(dataset) == (
        f"DATASETS {str(dataset)!r} task 'zz-linked': the task folder is a link to {outside}, outside the dataset: "
        f"replace the link with the file itself {HINT}"
    )


def test_a_link_inside_the_dataset_is_fine(dataset):
    (dataset / "count-lines" / "environment" / "copy.txt").symlink_to(
        dataset / "count-lines" / "environment" / "data.txt"
    )
    assert check_datasets((str(dataset),))[0].num_tasks == 3


def test_a_5_mb_instruction(dataset):
    (dataset / "count-lines" / "instruction.md").write_text("x" * 5_000_000)
    assert refused(dataset) == (
        f"DATASETS {str(dataset)!r} task 'count-lines': instruction.md is 5000000 characters, above "
        "TASK_INSTRUCTION_MAX_CHARS=20000 (the agent would get all of it on every turn): shorten it, or raise "
        f"TASK_INSTRUCTION_MAX_CHARS {HINT}"
    )


def test_every_bad_task_is_its_own_line(dataset):
    (dataset / "count-lines" / "task.toml").unlink()
    shutil.rmtree(dataset / "sum-numbers" / "tests")
    with pytest.raises(EnvError) as err:
        check_datasets((str(dataset),))
    assert [p.split("': ")[0] for p in err.value.problems] == [
        f"DATASETS {str(dataset)!r} task 'count-lines",
        f"DATASETS {str(dataset)!r} task 'sum-numbers",
    ]


def test_skip_serves_the_others_and_counts_them(dataset):
    shutil.rmtree(dataset / "sum-numbers" / "tests")
    [status] = check_datasets((str(dataset),), bad_tasks="skip")
    assert status.line() == (f"dataset   {dataset}: 2 tasks served, 1 skipped (DATASET_BAD_TASKS=skip; each below)")
    assert len(status.skipped) == 1 and "task 'sum-numbers'" in status.skipped[0]
    # What OpenEnv serves from now on (the Task API, rollouts, prebuild) is the two that passed.
    served = openenv_tasks.HarborTaskProvider([str(dataset)]).list_tasks(str(dataset))
    assert [t["task_name"] for t in served] == ["count-lines", "write-greeting"]


def test_skip_with_nothing_left_is_still_refused(dataset):
    for task in ("count-lines", "sum-numbers", "write-greeting"):
        (dataset / task / "task.toml").write_text("[agent]\ntimeout_sec = -1\n")
    with pytest.raises(EnvError) as err:
        check_datasets((str(dataset),), bad_tasks="skip")
    assert str(err.value).startswith(
        f"DATASETS entry {str(dataset)!r}: none of its 3 tasks passed the dataset check, so nothing would be served"
    )


def test_the_task_api_shows_the_instruction_the_agent_gets(dataset):
    text = "Count the lines. " * 400  # 6800 characters: past OpenEnv's 4000-character preview
    (dataset / "count-lines" / "instruction.md").write_text(text)
    check_datasets((str(dataset),))
    provider = openenv_tasks.HarborTaskProvider([str(dataset)])
    original = openenv_tasks.read_instruction
    try:
        assert len(provider.get_task(str(dataset), 0)["instruction"]) == 4002  # OpenEnv's own cut
        assert task_preview.install(20000) == (
            "task api  instructions shown whole, as the agent gets them (<= 20000 characters each)"
        )
        assert provider.get_task(str(dataset), 0)["instruction"] == text.strip()
    finally:
        openenv_tasks.read_instruction = original
