"""Sandbox names carry the stack, so a starting env server finds exactly its own leftovers."""

from env_server.sandboxes import ours, own_container_id, trial_prefix


def test_the_prefix_survives_harbors_compose_project_sanitising():
    assert trial_prefix("asyncgrpo-harbor") == "asyncgrpo-harbor-"
    assert trial_prefix("My Stack__2--x") == "my-stack-2-x-"
    assert trial_prefix("") == "asyncgrpo-harbor-"


def test_only_this_stacks_sandboxes_are_ours():
    mine, theirs = trial_prefix("asyncgrpo-harbor"), trial_prefix("asyncgrpo-harbor-faults")
    # OpenEnv names a trial f"{prefix}-{task}-{hex8}"; Harbor's sandbox is that plus "__env".
    assert ours("asyncgrpo-harbor--write-greeting-1a2b3c4d__env", mine)
    assert not ours("asyncgrpo-harbor-faults--write-greeting-1a2b3c4d__env", mine)
    assert ours("asyncgrpo-harbor-faults--write-greeting-1a2b3c4d__env", theirs)
    assert not ours("oe-write-greeting-1a2b3c4d__env", mine)


def test_own_container_id_comes_from_dockers_bind_mounts():
    cid = "ab" * 32
    line = f"612 600 0:52 /var/lib/docker/containers/{cid}/hostname /etc/hostname rw - ext4 /dev/sda1 rw"
    assert own_container_id(line) == cid
    assert own_container_id("1 0 8:1 / / rw - ext4 /dev/sda1 rw") == ""
