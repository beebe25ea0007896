"""The smoke test's cold/warm label counts the task sandbox images the stack really builds. The names below
are those compose gives the env server's prebuilds (`<project>--<task>-prebuild__env` + `-main`), the
trial naming of env_server/sandboxes.py; the old pattern (`hb__*`, Harbor's name for a prebuilt image it
is handed) matched none of them, so every run read as cold."""

import sys
from pathlib import Path

from env_server import sandboxes

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "smoke"))
from compose_stack import is_task_image  # noqa: E402


def test_the_prebuild_images_of_this_stack_count():
    prefix = sandboxes.trial_prefix("asyncgrpo-smoke")  # what env-server derives from its compose project
    built = f"{prefix}-count-lines-prebuild__env-main"
    assert built == "asyncgrpo-smoke--count-lines-prebuild__env-main"
    assert is_task_image("asyncgrpo-smoke", built)
    assert is_task_image("asyncgrpo-smoke", "asyncgrpo-smoke--write-greeting-prebuild__env-main")


def test_other_stacks_and_other_images_do_not():
    for name in (
        "asyncgrpo-faults--count-lines-prebuild__env-main",  # the fault suite's stack
        "asyncgrpo-smoke-x--count-lines-prebuild__env-main",  # a stack whose name only starts like ours
        "asyncgrpo-smoke--count-lines-ab12cd34__env-main",  # a rollout's own build (removed with its sandbox)
        "hb__count-lines",  # Harbor's name for a prebuilt image it is handed
        "asyncgrpo-harbor/trainer",
        "asyncgrpo-smoke-trainer",
    ):
        assert not is_task_image("asyncgrpo-smoke", name), name
