"""Preflight refuses a trials folder whose disk cannot keep TRIALS_MAX_GB (guards trials-disk, env-server's own
rule in env_server/trials.py): one line naming the setting, the figures and the fix. Host venv, no Docker."""

from test_checks import GCSFUSE, good_env, probes_for

from guards.checks import run_all

GB = 1024**3


def trials_lines(env, probes):
    return [(f.check, f.message) for f in run_all(env, probes) if f.check in ("trials-disk", "env-server-settings")]


def test_a_disk_that_cannot_keep_the_cap_is_refused(tmp_path):
    env = good_env(tmp_path, TRIALS_MAX_GB="10")
    probes = probes_for(tmp_path, GCSFUSE)
    asked = []
    probes.free_bytes = lambda where: asked.append(where) or 4 * GB
    assert trials_lines(env, probes) == [
        (
            "trials-disk",
            f"TRIALS_MAX_GB=10 lets trial folders grow to 10 GB in {tmp_path / 'trials'}, but only 4.0 GB is free "
            "there: free space on that disk, lower TRIALS_MAX_GB to at most 4.0, or set TRIALS_DIR to a folder on a "
            "larger disk",
        )
    ]
    assert str(tmp_path / "trials") in asked  # measured where the folder is (or will be made)


def test_folders_already_there_count_toward_the_cap(tmp_path):
    trials = tmp_path / "trials"
    (trials / "stack-task-1").mkdir(parents=True)
    with open(trials / "stack-task-1" / "result.json", "wb") as fh:
        fh.truncate(GB // 4)  # sparse: its size (what retention counts) without writing a quarter GB
    env = good_env(tmp_path, TRIALS_MAX_GB="1")
    probes = probes_for(tmp_path, GCSFUSE)
    probes.free_bytes = lambda where: 3 * GB // 4
    assert trials_lines(env, probes) == []
    probes.free_bytes = lambda where: GB // 2
    (line,) = [m for _, m in trials_lines(env, probes)]
    assert "only 0.5 GB is free there, with 0.2 GB already held by finished trial folders" in line


def test_no_size_cap_and_kubernetes_are_not_checked_here(tmp_path):
    probes = probes_for(tmp_path, GCSFUSE)
    probes.free_bytes = lambda where: 0
    assert trials_lines(good_env(tmp_path, TRIALS_MAX_GB="0"), probes) == []
    # On a cluster the folder is the env-server pod's emptyDir, not on preflight's node: the env server's start
    # checks it.
    found = [f.check for f in run_all(good_env(tmp_path, DEPLOYMENT="kubernetes"), probes)]
    assert "trials-disk" not in found


def test_a_bad_cap_is_one_line_not_two(tmp_path):
    """TRIALS_MAX_GB above its bound is env-server-settings' line; the disk is then checked at the default."""
    probes = probes_for(tmp_path, GCSFUSE)
    probes.free_bytes = lambda where: 100 * GB
    assert trials_lines(good_env(tmp_path, TRIALS_MAX_GB="1e9"), probes) == [
        (
            "env-server-settings",
            "TRIALS_MAX_GB='1e9' is above 100000: set TRIALS_MAX_GB to at most 100000 (default 10.0)",
        )
    ]
