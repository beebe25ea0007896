"""HUB_MODEL_ID checked at start with huggingface_hub's own validator (utils.validate_repo_id), in the trainer
image that preflight also runs in: the host venv has no huggingface_hub. A malformed id used to be found by
the push at the end of the night."""

import pytest

from guards.checks import Settings, check_trainer_settings


@pytest.mark.parametrize(
    ("repo_id", "why"),
    [
        (
            "me/qwen..grpo",
            "Cannot have -- or .. in repo_id: 'me/qwen..grpo'.",
        ),
        (
            "models/me/qwen",
            "Repo id must be in the form 'repo_name' or 'namespace/repo_name': 'models/me/qwen'. Use `repo_type` "
            "argument if needed.",
        ),
        (
            "me/qwen grpo",
            "Repo id must use alphanumeric chars, '-', '_' or '.'. The name cannot start or end with '-' or '.' and "
            "the maximum length is 96: 'me/qwen grpo'.",
        ),
    ],
)
def test_a_malformed_hub_model_id_is_one_line_at_preflight(repo_id, why):
    assert check_trainer_settings(Settings({"HUB_MODEL_ID": repo_id}), None) == [
        f"HUB_MODEL_ID={repo_id!r} is not a Hub repository id ({why}): set it like your-name/qwen3-harbor-grpo, "
        "or leave it empty to push nothing"
    ]


def test_a_newline_in_hub_model_id_is_the_control_character_line():
    assert check_trainer_settings(Settings({"HUB_MODEL_ID": "me/qwen\nx"}), None) == [
        "HUB_MODEL_ID='me/qwen\\nx' contains a control character ('\\n' at character 8): set HUB_MODEL_ID to one "
        "line of printable text"
    ]


@pytest.mark.parametrize("repo_id", ["", "me/qwen3-harbor-grpo", "qwen3_grpo.v2"])
def test_a_good_hub_model_id_passes(repo_id):
    assert check_trainer_settings(Settings({"HUB_MODEL_ID": repo_id}), None) is None
