"""HUB_MODEL_ID checked at start with huggingface_hub's own validator (utils.validate_repo_id), in the trainer
image that preflight also runs in: the host venv has no huggingface_hub. A malformed id used to be found by
the push at the end of the night."""

import sys
from pathlib import Path

import pytest

from guards.checks import TRAINER_ONLY, Settings, check_hub_access, check_trainer_settings


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


# --- the token's write access, asked of the Hub at start (trainer phase), against the local stand-in -------
# The Hub itself is unreachable from the test machines: tests/standins/hub.py answers the two calls
# huggingface_hub makes (whoami-v2, auth-check/write) as the Hub does.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "standins"))
from hub import HubStandin  # noqa: E402

TOKEN = "hf_standin_token"


def access(hub, repo, token=TOKEN):
    line = check_hub_access(Settings({"HUB_MODEL_ID": repo, "HUB_TOKEN": token, "HF_ENDPOINT": hub.url}), None)
    return [line] if line else []


def test_a_write_token_of_the_namespace_passes(tmp_path):
    with HubStandin(tmp_path, token=TOKEN, user="me", orgs=("team",)) as hub:
        assert access(hub, "me/qwen-grpo") == []  # not created yet: judged by namespace and role
        assert access(hub, "team/qwen-grpo") == []
        (tmp_path / "me" / "made").mkdir(parents=True)
        assert access(hub, "me/made") == []  # exists: the Hub's auth-check/write answers
        assert ("GET", "/api/models/me/made/auth-check/write") in hub.requests


def test_each_token_that_cannot_write_is_one_line(tmp_path):
    fix = "set HUB_TOKEN to a write token of that namespace (huggingface.co/settings/tokens), or unset HUB_MODEL_ID"
    with HubStandin(tmp_path, token=TOKEN, user="me", orgs=("team",)) as hub:
        assert access(hub, "me/qwen-grpo", token="hf_wrong") == [
            f"HUB_TOKEN is not accepted by {hub.url} (401 on whoami) for HUB_MODEL_ID=me/qwen-grpo: {fix}"
        ]
        assert access(hub, "someone-else/qwen-grpo") == [
            "HUB_MODEL_ID=someone-else/qwen-grpo is under someone-else, but HUB_TOKEN is me's, who is not a member "
            f"of it: set HUB_MODEL_ID=me/qwen-grpo, or {fix}"
        ]
        hub.role = "read"
        assert access(hub, "me/qwen-grpo") == [
            f"HUB_TOKEN of me is a read token and cannot create HUB_MODEL_ID=me/qwen-grpo: {fix}"
        ]
        (tmp_path / "me" / "made").mkdir(parents=True)
        assert access(hub, "me/made") == [
            f"HUB_TOKEN of me cannot write HUB_MODEL_ID=me/made at {hub.url} (403 on auth-check/write): {fix}"
        ]


def test_a_hub_that_does_not_answer_is_said_and_not_a_finding(capsys):
    from support import free_port

    url = f"http://127.0.0.1:{free_port()}"
    env = {"HUB_MODEL_ID": "me/qwen-grpo", "HUB_TOKEN": TOKEN, "HF_ENDPOINT": url}
    assert check_hub_access(Settings(env), None) is None
    assert f"could not ask {url} whether HUB_TOKEN can write HUB_MODEL_ID=me/qwen-grpo (ConnectError)" in (
        capsys.readouterr().out
    )


def test_only_the_trainer_asks():
    """Preflight never holds HUB_TOKEN (a secret of the trainer alone): the check runs in the trainer phase."""
    assert "hub-access" in TRAINER_ONLY
