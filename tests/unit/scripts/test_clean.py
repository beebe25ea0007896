"""scripts/clean removes this project's containers, networks, volumes, images and folders, and nothing of
anyone else's; --dry-run lists the same and removes nothing. The docker CLI is a stub answering from a fixed
host state and recording every call: the real daemon here holds images other runs use."""

from __future__ import annotations

import json
import os
import sys

import pytest
from scripts_support import run_script, write_exe

OURS_BASE = "sha256:" + "b" * 64
HOST = {
    "containers": [
        "c1|asyncgrpo-harbor-trainer-1|asyncgrpo-harbor|",
        "c2|asyncgrpo-smoke--count-lines-ab12cd34__x-main-1|asyncgrpo-smoke--count-lines-ab12cd34__x|",
        "c3|es-it-abc-env-server||1",
        "c4|other-web-1|other|",
        "c5|asyncgrpo-harbor-fork-web-1|asyncgrpo-harbor-fork|",
        "c6|plain||",
        "c7|asyncgrpo-learn-trainer-1|asyncgrpo-learn|",
        "c8|asyncgrpo-learner-web-1|asyncgrpo-learner|",
    ],
    "networks": [
        "n1|asyncgrpo-harbor_default|asyncgrpo-harbor",
        "n2|bridge|",
        "n3|asyncgrpo-smoke--t-1__env_default|asyncgrpo-smoke--t-1__env",
        "n4|other_default|other",
    ],
    "volumes": ["asyncgrpo-harbor_handoff|asyncgrpo-harbor", "other_data|other", "0a1b2c|"],
    "images": [
        "asyncgrpo-harbor/trainer|local|sha256:" + "t" * 64,
        "asyncgrpo-harbor/mock-engine|local|sha256:" + "m" * 64,
        "asyncgrpo-harbor/debian-trixie-python|local|" + OURS_BASE,
        "python|3.12-slim|" + OURS_BASE,
        "asyncgrpo-smoke--count-lines-prebuild__env-main|latest|sha256:" + "p" * 64,
        "other--count-lines-prebuild__env-main|latest|sha256:" + "o" * 64,
        "asyncgrpo-harbor-fork/x|latest|sha256:" + "f" * 64,
        "python|3.13|sha256:" + "q" * 64,
        "<none>|<none>|sha256:" + "n" * 64,
    ],
    "base_id": OURS_BASE,
    "dangling": {"asyncgrpo-harbor": ["sha256:" + "d" * 64]},
}

FAKE_DOCKER = """#!{python}
import json, sys
state = json.load(open({state!r}))
args = sys.argv[1:]
with open({log!r}, "a") as f:
    f.write(" ".join(args) + "\\n")
if args[0] == "info":
    sys.exit(0)
if args[:2] == ["ps", "-a"]:
    print("\\n".join(state["containers"]))
elif args[:2] == ["network", "ls"]:
    print("\\n".join(state["networks"]))
elif args[:2] == ["volume", "ls"]:
    print("\\n".join(state["volumes"]))
elif args[:2] == ["image", "inspect"]:
    if not state["base_id"]:
        sys.exit(1)
    print(state["base_id"])
elif args[:2] == ["image", "ls"] and "-q" in args:
    label = [a for a in args if a.startswith("label=com.docker.compose.project=")][0].split("=")[-1]
    print("\\n".join(state["dangling"].get(label, [])))
elif args[:2] == ["image", "ls"]:
    print("\\n".join(state["images"]))
"""

REMOVED_FROM_DOCKER = [
    "rm -f -v c1",
    "rm -f -v c2",
    "rm -f -v c3",
    "rm -f -v c7",
    "network rm n1",
    "network rm n3",
    "volume rm asyncgrpo-harbor_handoff",
    "rmi asyncgrpo-harbor/trainer:local",
    "rmi asyncgrpo-harbor/mock-engine:local",
    "rmi python:3.12-slim",
    "rmi asyncgrpo-smoke--count-lines-prebuild__env-main:latest",
    "rmi asyncgrpo-harbor/debian-trixie-python:local",
    "rmi sha256:" + "d" * 64,
]


@pytest.fixture
def host(fake_repo, stub_bin, tmp_path):
    """The stub daemon, a home, and the folders a run leaves: ours, and others' that must survive."""

    def make(state=HOST, plugin_target=None):
        state_file = tmp_path / "state.json"
        state_file.write_text(json.dumps(state))
        write_exe(
            stub_bin / "docker",
            FAKE_DOCKER.format(python=sys.executable, state=str(state_file), log=str(tmp_path / "docker.log")),
        )
        home = tmp_path / "home"
        litter = tmp_path / "litter"
        for d in (
            fake_repo / ".run" / "bucket" / "checkpoints",
            fake_repo / ".venv" / "bin",
            litter / "asyncgrpo-harbor" / "trials" / "t1",
            litter / "asyncgrpo-rollout-gate-x1y2",
            litter / "asyncgrpo-es-wheelhouse",
            litter / "someone-elses",
            home / ".docker" / "cli-plugins",
        ):
            d.mkdir(parents=True, exist_ok=True)
        (litter / "base-rootfs.Ab12Cd.log").write_text("debootstrap log\n")
        (litter / "keep.log").write_text("not ours\n")
        target = plugin_target or fake_repo / ".venv" / "lib" / "compose" / "docker-compose"
        os.symlink(target, home / ".docker" / "cli-plugins" / "docker-compose")
        return home, litter

    return make


def docker_removals(tmp_path) -> list[str]:
    log = (tmp_path / "docker.log").read_text().splitlines()
    return [line for line in log if line.split()[0] in ("rm", "rmi") or line.split()[1:2] == ["rm"]]


def test_dry_run_lists_everything_of_ours_and_removes_nothing(fake_repo, stub_bin, tmp_path, host):
    home, litter = host()
    out = run_script(
        fake_repo / "scripts" / "clean",
        "--dry-run",
        stub_bin=stub_bin,
        home=home,
        env={"ASYNCGRPO_CLEAN_TMP": str(litter)},
    )
    assert out.returncode == 0, out.stderr
    listed = [
        line.removeprefix("would remove ") for line in out.stdout.splitlines() if line.startswith("would remove ")
    ]
    assert listed == [
        "container asyncgrpo-harbor-trainer-1",
        "container asyncgrpo-smoke--count-lines-ab12cd34__x-main-1",
        "container es-it-abc-env-server",
        "container asyncgrpo-learn-trainer-1",
        "network asyncgrpo-harbor_default",
        "network asyncgrpo-smoke--t-1__env_default",
        "volume asyncgrpo-harbor_handoff",
        "image asyncgrpo-harbor/trainer:local",
        "image asyncgrpo-harbor/mock-engine:local",
        "image python:3.12-slim (the tag scripts/build-base-images gave asyncgrpo-harbor/debian-trixie-python:local)",
        "image asyncgrpo-smoke--count-lines-prebuild__env-main:latest",
        "image asyncgrpo-harbor/debian-trixie-python:local",
        "dangling image sha256:" + "d" * 64 + " (built by compose project asyncgrpo-harbor)",
        f"{fake_repo}/.run",
        f"{fake_repo}/.venv",
        f"{litter}/asyncgrpo-harbor",
        f"{litter}/asyncgrpo-rollout-gate-x1y2",
        f"{litter}/base-rootfs.Ab12Cd.log",
        f"{litter}/asyncgrpo-es-wheelhouse",
        f"{home}/.docker/cli-plugins/docker-compose (a link into this clone's .venv)",
    ]
    assert out.stdout.splitlines()[-1] == "dry run: 20 thing(s) would be removed"
    assert docker_removals(tmp_path) == []
    assert (fake_repo / ".run" / "bucket").is_dir() and (litter / "asyncgrpo-rollout-gate-x1y2").is_dir()
    assert (home / ".docker" / "cli-plugins" / "docker-compose").is_symlink()


def test_clean_removes_exactly_ours(fake_repo, stub_bin, tmp_path, host):
    home, litter = host()
    out = run_script(
        fake_repo / "scripts" / "clean", stub_bin=stub_bin, home=home, env={"ASYNCGRPO_CLEAN_TMP": str(litter)}
    )
    assert out.returncode == 0, out.stderr
    assert docker_removals(tmp_path) == REMOVED_FROM_DOCKER
    assert sorted(p.name for p in litter.iterdir()) == ["keep.log", "someone-elses"]
    assert sorted(p.name for p in fake_repo.iterdir()) == ["scripts"]
    assert list((home / ".docker" / "cli-plugins").iterdir()) == []
    assert out.stdout.splitlines()[-1] == "removed 20 thing(s)"


def test_a_pulled_python_image_and_another_clones_plugin_link_stay(fake_repo, stub_bin, tmp_path, host):
    state = {**HOST, "images": [*HOST["images"][:3], "python|3.12-slim|sha256:" + "9" * 64]}
    home, litter = host(state, plugin_target=tmp_path / "elsewhere" / "docker-compose")
    out = run_script(
        fake_repo / "scripts" / "clean", stub_bin=stub_bin, home=home, env={"ASYNCGRPO_CLEAN_TMP": str(litter)}
    )
    assert out.returncode == 0, out.stderr
    assert "rmi python:3.12-slim" not in docker_removals(tmp_path)
    assert (home / ".docker" / "cli-plugins" / "docker-compose").is_symlink()


def test_keep_images_and_unknown_arguments(fake_repo, stub_bin, tmp_path, host):
    home, litter = host()
    env = {"ASYNCGRPO_CLEAN_TMP": str(litter)}
    out = run_script(fake_repo / "scripts" / "clean", "--keep-images", stub_bin=stub_bin, home=home, env=env)
    # The tagged images stay; the dangling one a rebuild left goes all the same.
    assert out.returncode == 0
    assert [c for c in docker_removals(tmp_path) if c.startswith("rmi")] == ["rmi sha256:" + "d" * 64]
    bad = run_script(fake_repo / "scripts" / "clean", "--all", stub_bin=stub_bin, home=home, env=env)
    assert bad.returncode == 2 and bad.stderr == "clean: unknown argument '--all' (scripts/clean --help)\n"
