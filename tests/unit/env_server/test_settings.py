"""Settings: bad values are one line naming the variable; MAX_CONCURRENT_ENVS covers the trainer."""

import pytest

from stack.readers.env_server import EnvError, Settings


def test_defaults_bind_loopback_and_serve_the_starter_set():
    s = Settings.from_env({})
    assert (s.env_server_host, s.capture_host) == ("127.0.0.1", "127.0.0.1")
    assert s.datasets == ("/app/datasets/starter",)


def test_max_concurrent_envs_is_raised_to_the_inflight_rollouts_with_a_note():
    s = Settings.from_env({"MAX_CONCURRENT_ENVS": "4", "MAX_INFLIGHT_ROLLOUTS": "8"})
    assert s.max_concurrent_envs == 8
    assert any("MAX_CONCURRENT_ENVS raised from 4 to 8" in n for n in s.notes)


def test_enough_envs_needs_no_note():
    s = Settings.from_env({"MAX_CONCURRENT_ENVS": "16", "MAX_INFLIGHT_ROLLOUTS": "8"})
    assert s.max_concurrent_envs == 16 and not s.notes


@pytest.mark.parametrize(
    "env, words",
    [
        (
            {"SANDBOX": "modal"},
            "SANDBOX='modal' is not allowed: set SANDBOX to one of: e2b (production, E2B's cloud), docker (local "
            "sandboxes on this host) (default e2b)",
        ),
        (
            {"AGENT_INSTALL": "apt"},
            "AGENT_INSTALL='apt' is not allowed: set AGENT_INSTALL to one of online, preinstalled, wheelhouse "
            "(default online)",
        ),
        (
            {"CAPTURE_PORT": "eighty"},
            "CAPTURE_PORT='eighty' is not a TCP port: set CAPTURE_PORT to a number in 1-65535 (default 8100)",
        ),
        (
            {"MAX_INFLIGHT_ROLLOUTS": "0"},
            "MAX_INFLIGHT_ROLLOUTS='0' is below 1: set MAX_INFLIGHT_ROLLOUTS to at least 1 (default 8)",
        ),
        (
            {"ENGINE_URL": "http://127.0.0.1:8001/v1"},
            "ENGINE_URL='http://127.0.0.1:8001/v1' ends in /v1: set the engine's root, e.g. http://127.0.0.1:8001 "
            "(/v1 is added where the OpenAI API is called)",
        ),
    ],
)
def test_bad_values_name_the_variable(env, words):
    with pytest.raises(EnvError) as info:
        Settings.from_env(env)
    assert str(info.value) == words


def test_every_bad_value_is_reported_at_once():
    with pytest.raises(EnvError) as info:
        Settings.from_env({"SANDBOX": "modal", "CAPTURE_PORT": "x", "ENV_SERVER_SHUTDOWN_GRACE_S": "soon"})
    assert [line.split("=")[0] for line in str(info.value).splitlines()] == [
        "SANDBOX",
        "CAPTURE_PORT",
        "ENV_SERVER_SHUTDOWN_GRACE_S",
    ]


def test_engine_url_is_the_root():
    assert Settings.from_env({}).engine_url == "http://127.0.0.1:8001"
    assert Settings.from_env({"ENGINE_URL": "http://10.0.0.9:9000/"}).engine_url == "http://10.0.0.9:9000"


def test_the_admin_key_is_never_held():
    s = Settings.from_env({"OPENENV_CAPTURE_ADMIN_KEY": "s3cret-value"})
    assert s.admin_key_set
    assert "s3cret-value" not in repr(s)


def test_eval_datasets_are_served_alongside_the_training_ones_once():
    s = Settings.from_env({"DATASETS": "/d/train,/d/shared", "EVAL_DATASETS": "/d/held, /d/shared"})
    assert s.datasets == ("/d/train", "/d/shared", "/d/held")
