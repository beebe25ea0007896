"""Settings and startup checks that keep the public surface and the host safe: one exact line each."""

from __future__ import annotations

import pytest

from env_server.checks import check_dataset_sources, drop_unneeded_hf_token
from stack.readers.env_server import EnvError, Settings


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "[::]"])
def test_a_wildcard_capture_host_is_refused(host):
    with pytest.raises(EnvError) as exc:
        Settings.from_env({"CAPTURE_HOST": host})
    assert str(exc.value) == (
        f"CAPTURE_HOST={host!r} would publish the capture proxy on every interface: set it to 127.0.0.1 "
        "(behind a tunnel) or to the one address the sandboxes route to (TUNNEL_PROVIDER=direct)"
    )


def test_a_specific_capture_host_is_kept():
    assert Settings.from_env({"CAPTURE_HOST": "172.17.0.1"}).capture_host == "172.17.0.1"


def test_plain_http_direct_url_is_refused_for_remote_sandboxes():
    env = {"TUNNEL_PROVIDER": "direct", "SANDBOX": "e2b", "DIRECT_URL": "http://203.0.113.5:8100"}
    with pytest.raises(EnvError) as exc:
        Settings.from_env(env)
    assert str(exc.value) == (
        "DIRECT_URL=http://203.0.113.5:8100 is plain http but SANDBOX=e2b sandboxes reach it across the "
        "internet, where each sandbox's session key would travel in clear text: put TLS in front of the "
        "capture port and use an https:// DIRECT_URL, or use TUNNEL_PROVIDER=cloudflared"
    )


@pytest.mark.parametrize(
    "env",
    [
        {"TUNNEL_PROVIDER": "direct", "SANDBOX": "e2b", "DIRECT_URL": "https://proxy.example.com"},
        {"TUNNEL_PROVIDER": "direct", "SANDBOX": "docker", "DIRECT_URL": "http://172.17.0.1:8100"},
    ],
)
def test_https_or_a_local_sandbox_may_use_direct(env):
    assert Settings.from_env(env).direct_url == env["DIRECT_URL"]


WILDCARD_LINE = (
    "CAPTURE_HOST='0.0.0.0' would publish the capture proxy on every interface: set it to 127.0.0.1 (behind a "
    "tunnel) or to the one address the sandboxes route to (TUNNEL_PROVIDER=direct)"
)
PLAIN_HTTP_LINE = (
    "DIRECT_URL=http://203.0.113.5:8100 is plain http but SANDBOX=e2b sandboxes reach it across the internet, where "
    "each sandbox's session key would travel in clear text: put TLS in front of the capture port and use an https:// "
    "DIRECT_URL, or use TUNNEL_PROVIDER=cloudflared"
)


def test_a_wildcard_capture_host_and_a_plain_http_direct_url_are_both_reported():
    """Each used to raise at once, hiding every other bad env-server setting (preflight prints one line per
    problem) until it was fixed and the stack started again."""
    env = {
        "CAPTURE_HOST": "0.0.0.0",
        "TUNNEL_PROVIDER": "direct",
        "SANDBOX": "e2b",
        "DIRECT_URL": "http://203.0.113.5:8100",
        "CAPTURE_MAX_BODY_MB": "100000",
    }
    with pytest.raises(EnvError) as exc:
        Settings.from_env(env)
    assert exc.value.problems == [
        WILDCARD_LINE,
        PLAIN_HTTP_LINE,
        "CAPTURE_MAX_BODY_MB='100000' is above 64: set it in 1-64 (a full 32k-token context is ~150 KB of JSON; each "
        "request's body is held in memory) (default 8)",
    ]


def test_a_wildcard_capture_host_behind_a_tunnel_is_one_line_not_two():
    """The tunnel rule (loopback or the bridge behind a tunnel) reads the default in the refused value's place:
    the wildcard is one problem, said once."""
    with pytest.raises(EnvError) as exc:
        Settings.from_env({"CAPTURE_HOST": "0.0.0.0", "TUNNEL_PROVIDER": "cloudflared", "TASK_ENV_ALLOW": "*"})
    assert exc.value.problems == [WILDCARD_LINE, f"TASK_ENV_ALLOW='*' entry '*' {FIX_NAME}"]


def test_front_defaults_and_task_env_allow_list():
    s = Settings.from_env({"TASK_ENV_ALLOW": "TEST_DIR, MY_VAR"})
    assert (s.capture_max_body_mb, s.capture_max_concurrent) == (8, 64)
    assert s.task_env_allow == ("TEST_DIR", "MY_VAR")


def test_docker_sandboxes_take_local_datasets_only():
    s = Settings.from_env({"SANDBOX": "docker", "DATASETS": "/app/datasets/starter,org/some-tasks"})
    with pytest.raises(EnvError) as exc:
        check_dataset_sources(s)
    assert str(exc.value) == (
        "SANDBOX=docker builds each task's Dockerfile and compose file on this host's Docker daemon, so it "
        "takes local dataset folders only, and DATASETS entry 'org/some-tasks' is not one: download it, read "
        "it, and point DATASETS at the folder; or set SANDBOX_DOCKER_REMOTE_TASKS_OK="
        "i-trust-these-tasks-with-this-host"
    )
    ok = Settings.from_env(
        {
            "SANDBOX": "docker",
            "DATASETS": "org/some-tasks",
            "SANDBOX_DOCKER_REMOTE_TASKS_OK": "i-trust-these-tasks-with-this-host",
        }
    )
    check_dataset_sources(ok)
    check_dataset_sources(Settings.from_env({"SANDBOX": "e2b", "DATASETS": "org/some-tasks"}))


def test_the_remote_tasks_opt_out_must_be_said_in_so_many_words():
    with pytest.raises(EnvError) as exc:
        Settings.from_env({"SANDBOX_DOCKER_REMOTE_TASKS_OK": "yes"})
    assert str(exc.value) == (
        "SANDBOX_DOCKER_REMOTE_TASKS_OK='yes' is not the opt-out phrase: set it to exactly "
        "i-trust-these-tasks-with-this-host, or leave it empty"
    )


def test_hf_token_leaves_env_server_when_no_dataset_needs_it():
    environ = {"HF_TOKEN": "hf_secret"}
    assert drop_unneeded_hf_token(("/app/datasets/starter",), environ) == (
        "hf token  dropped from env-server's environment: every dataset is a local folder"
    )
    assert "HF_TOKEN" not in environ
    environ = {"HF_TOKEN": "hf_secret"}
    assert (
        drop_unneeded_hf_token(("org/tasks",), environ) == "hf token  kept: a dataset comes from the Hub or a registry"
    )
    assert environ == {"HF_TOKEN": "hf_secret"}


FIX_NAME = (
    "is not a variable name (wildcards and patterns are not expanded): list each variable a task may read by its "
    "exact name, comma-separated, e.g. TASK_ENV_ALLOW=TEST_DIR,MY_VAR"
)


def secret_line(value: str, name: str) -> str:
    return (
        f"TASK_ENV_ALLOW={value!r} entry {name!r} names a secret, and tasks run code from the dataset and from the "
        f"model being trained, which would read it: remove {name} from TASK_ENV_ALLOW (a task that needs a "
        "credential of its own gets it as a literal in its task.toml env table)"
    )


SECRETS_FIX = (
    "name secrets, and tasks run code from the dataset and from the model being trained, which would read them: "
    "remove {names} from TASK_ENV_ALLOW (a task that needs a credential of its own gets it as a literal in its "
    "task.toml env table)"
)


@pytest.mark.parametrize(
    "value, line",
    [
        ("*", f"TASK_ENV_ALLOW='*' entry '*' {FIX_NAME}"),
        ("TEST_*", f"TASK_ENV_ALLOW='TEST_*' entry 'TEST_*' {FIX_NAME}"),
        ("MY_VAR,[A-Z]*", f"TASK_ENV_ALLOW='MY_VAR,[A-Z]*' entry '[A-Z]*' {FIX_NAME}"),
        ("MY VAR", f"TASK_ENV_ALLOW='MY VAR' entry 'MY VAR' {FIX_NAME}"),
        # Every secret entry in the one line, not the first alone (the operator fixed them one restart at a time).
        (
            "E2B_API_KEY,HF_TOKEN",
            "TASK_ENV_ALLOW='E2B_API_KEY,HF_TOKEN' entries 'E2B_API_KEY', 'HF_TOKEN' "
            + SECRETS_FIX.format(names="E2B_API_KEY and HF_TOKEN"),
        ),
        (
            "HF_TOKEN,TEST_DIR,WANDB_API_KEY,HF_TOKEN,DB_PASSWORD",
            "TASK_ENV_ALLOW='HF_TOKEN,TEST_DIR,WANDB_API_KEY,HF_TOKEN,DB_PASSWORD' entries 'HF_TOKEN', "
            "'WANDB_API_KEY', 'DB_PASSWORD' " + SECRETS_FIX.format(names="HF_TOKEN, WANDB_API_KEY and DB_PASSWORD"),
        ),
        (
            "TEST_*,*",
            "TASK_ENV_ALLOW='TEST_*,*' entries 'TEST_*', '*' are not variable names"
            + FIX_NAME.removeprefix("is not a variable name"),
        ),
        # Both kinds in one value: one line, both halves.
        (
            "*,HF_TOKEN",
            f"TASK_ENV_ALLOW='*,HF_TOKEN' entry '*' {FIX_NAME}; "
            + secret_line("", "HF_TOKEN").removeprefix("TASK_ENV_ALLOW='' "),
        ),
        ("MY_VAR,HF_TOKEN", secret_line("MY_VAR,HF_TOKEN", "HF_TOKEN")),
        ("HUB_TOKEN", secret_line("HUB_TOKEN", "HUB_TOKEN")),
        ("WANDB_API_KEY", secret_line("WANDB_API_KEY", "WANDB_API_KEY")),
        ("TUNNEL_TOKEN", secret_line("TUNNEL_TOKEN", "TUNNEL_TOKEN")),
        ("CLOUDFLARED_TOKEN", secret_line("CLOUDFLARED_TOKEN", "CLOUDFLARED_TOKEN")),
        ("OPENENV_CAPTURE_ADMIN_KEY", secret_line("OPENENV_CAPTURE_ADMIN_KEY", "OPENENV_CAPTURE_ADMIN_KEY")),
        ("GITHUB_TOKEN", secret_line("GITHUB_TOKEN", "GITHUB_TOKEN")),
        ("AWS_SECRET_ACCESS_KEY", secret_line("AWS_SECRET_ACCESS_KEY", "AWS_SECRET_ACCESS_KEY")),
        ("DB_PASSWORD", secret_line("DB_PASSWORD", "DB_PASSWORD")),
        ("my_api_key", secret_line("my_api_key", "my_api_key")),
        ("SIGNING_SECRET", secret_line("SIGNING_SECRET", "SIGNING_SECRET")),
        (
            "TEST_DIR\nHF_TOKEN",
            "TASK_ENV_ALLOW='TEST_DIR\\nHF_TOKEN' has a line break: list the names on one line, comma-separated "
            "(TASK_ENV_ALLOW=A,B)",
        ),
        (
            "TEST_DIR\n",
            "TASK_ENV_ALLOW='TEST_DIR\\n' has a line break: list the names on one line, comma-separated "
            "(TASK_ENV_ALLOW=A,B)",
        ),
    ],
)
def test_task_env_allow_refuses_wildcards_secrets_and_line_breaks(value, line):
    with pytest.raises(EnvError) as exc:
        Settings.from_env({"TASK_ENV_ALLOW": value})
    assert str(exc.value) == line


@pytest.mark.parametrize(
    "value, names",
    [
        ("", ()),
        ("TEST_DIR", ("TEST_DIR",)),
        (" TEST_DIR , MY_VAR ,", ("TEST_DIR", "MY_VAR")),
        (
            "KEYBOARD_LAYOUT,MONKEY_NAME,TOKENIZERS_PARALLELISM",
            ("KEYBOARD_LAYOUT", "MONKEY_NAME", "TOKENIZERS_PARALLELISM"),
        ),
    ],
)
def test_task_env_allow_takes_plain_names(value, names):
    assert Settings.from_env({"TASK_ENV_ALLOW": value}).task_env_allow == names
