"""Which compose commands env-server sends to `docker` instead (env_server/sandbox_calls.py), on the exact
argument lists Harbor 0.25.0 builds (harbor/environments/docker/docker.py `_compose_exec`, docker_unix.py's
uploads and downloads). Anything else must stay with compose: the translation answers None. The calls
themselves run against real Harbor and a real daemon in
tests/integration/env_server_guards/test_sandbox_calls.py."""

from __future__ import annotations

import pytest

from env_server.sandbox_calls import engine_args, skipped

C = "f00dcafe"


def test_harbors_exec_with_workdir_env_and_user_keeps_every_flag_in_order():
    command = ["exec", "-w", "/app", "-e", "A=1", "-e", "B=x y", "-u", "agent", "main", "bash", "-c", "ls | wc -l"]
    assert engine_args(command, C, stdin=False) == [
        "exec",
        *["-w", "/app", "-e", "A=1", "-e", "B=x y", "-u", "agent"],
        C,
        *["bash", "-c", "ls | wc -l"],
    ]


def test_compose_no_tty_flag_is_dropped_and_stdin_gets_docker_interactive():
    # docker_unix.py `_extract_tar`: the tar stream arrives on stdin, which `docker exec` reads only with -i.
    command = ["exec", "-T", "-u", "root", "main", "tar", "-xf", "-", "-C", "/logs"]
    assert engine_args(command, C, stdin=True) == ["exec", "-i", "-u", "root", C, "tar", "-xf", "-", "-C", "/logs"]
    assert engine_args(command, C, stdin=False) == ["exec", "-u", "root", C, "tar", "-xf", "-", "-C", "/logs"]


@pytest.mark.parametrize(
    "command",
    [
        ["exec", "sidecar", "sh", "-c", "true"],  # another service: compose knows its container
        ["exec", "--index", "2", "main", "true"],  # a flag this module does not translate
        ["exec", "-d", "main", "true"],
        ["exec", "main"],  # no command
        ["exec", "-w"],  # a flag without its value
        ["up", "-d", "--wait"],
        ["down", "--remove-orphans"],
        ["build"],
        ["config", "--format", "json"],
        [],
    ],
)
def test_everything_else_stays_with_compose(command):
    assert engine_args(command, C, stdin=False) is None


def test_cp_both_ways_names_the_container():
    assert engine_args(["cp", "/host/tests/.", "main:/tests"], C, stdin=False) == ["cp", "/host/tests/.", f"{C}:/tests"]
    assert engine_args(["cp", "main:/logs/agent/.", "/trials/t/agent"], C, stdin=False) == [
        "cp",
        f"{C}:/logs/agent/.",
        "/trials/t/agent",
    ]


@pytest.mark.parametrize(
    "command",
    [
        ["cp", "sidecar:/x", "/host/x"],  # another service
        ["cp", "main:/a", "main:/b"],  # container to container: not a shape Harbor builds
        ["cp", "relative/x", "main:/x"],  # a host path that is not absolute: compose resolves it from its cwd
        ["cp", "-a", "/host/x", "main:/x"],
        ["cp", "/host/x"],
    ],
)
def test_cp_shapes_harbor_does_not_build_stay_with_compose(command):
    assert engine_args(command, C, stdin=False) is None


class Env:
    """The mark `skipped` reads, as the wrapper's `up` sets it."""

    def __init__(self, up_tried: bool = False):
        if up_tried:
            self._asyncgrpo_up_tried = True


def test_the_down_before_a_sessions_first_up_is_skipped_and_every_other_call_runs():
    assert skipped(Env(), ["down", "--remove-orphans"]) == "a new session id has nothing to remove"
    assert skipped(Env(up_tried=True), ["down", "--remove-orphans"]) is None  # a start that got as far as `up`
    assert skipped(Env(), ["down", "--rmi", "local", "--volumes", "--remove-orphans"]) is None  # the teardown
    assert skipped(Env(), ["down"]) is None
    assert skipped(Env(), ["build"]) is None
    assert skipped(Env(), ["up", "--detach", "--wait"]) is None
