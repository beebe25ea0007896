"""env-server's startup refusals for a dataset it cannot serve and a trials folder it cannot write, each its
exact one line (OpenEnv's own resolver decides what a dataset is)."""

import pytest

from env_server.checks import EnvError, check_datasets, check_trials_dir


def test_a_mistyped_dataset_folder_is_named_as_a_folder(tmp_path):
    spec = str(tmp_path / "startr")
    with pytest.raises(EnvError) as err:
        check_datasets((spec,))
    assert str(err.value) == (
        f"DATASETS entry {spec!r} is not a folder inside env-server: fix DATASETS in .env (default "
        "/app/datasets/starter) or mount that folder into the env-server container"
    )


def test_a_folder_without_tasks_did_not_resolve(tmp_path):
    spec = str(tmp_path)
    with pytest.raises(EnvError) as err:
        check_datasets((spec,))
    # OpenEnv's own words, cut at 200 characters so one line stays one line.
    openenv = (
        f"no Harbor tasks found for {spec!r}. Expected an HF dataset repo laid out as `tasks/<name>/`, a local "
        "directory of task dirs, or a Harbor registry `name@version`."
    )
    assert str(err.value) == (
        f"DATASETS entry {spec!r} did not resolve (ValueError: {openenv[:200]}); fix DATASETS in .env: a local "
        "folder of Harbor tasks, a Hub dataset id (needs HF_TOKEN for a private one), or a Harbor registry "
        "name@version"
    )


def test_trials_dir_that_cannot_be_written(tmp_path):
    (tmp_path / "a-file").write_text("not a folder")
    trials = str(tmp_path / "a-file" / "trials")
    with pytest.raises(EnvError) as err:
        check_trials_dir(trials, containerised=False)
    assert str(err.value) == (
        f"TRIALS_DIR={trials} is not writable by env-server (Not a directory); fix the folder's owner on the host "
        "or point TRIALS_DIR elsewhere"
    )


def test_an_existing_trials_dir_is_proven_writable_by_writing_in_it(tmp_path):
    # Root (as in the images) writes through any mode bits: the write fails here because the probe file's
    # name is taken by a folder, which only an actual write finds out.
    (tmp_path / "trials" / ".write-test").mkdir(parents=True)
    trials = str(tmp_path / "trials")
    with pytest.raises(EnvError) as err:
        check_trials_dir(trials, containerised=False)
    assert str(err.value) == (
        f"TRIALS_DIR={trials} is not writable by env-server (Is a directory); fix the folder's owner on the host "
        "or point TRIALS_DIR elsewhere"
    )


def test_trials_dir_not_mounted_at_the_same_path_inside_env_server(tmp_path):
    trials = str(tmp_path / "trials")
    with pytest.raises(EnvError) as err:
        check_trials_dir(trials, containerised=True, mounts={"/", "/bucket", "/var/run/docker.sock"})
    assert str(err.value) == (
        "SANDBOX=docker drives the host's Docker daemon, which resolves Harbor's bind mounts on the host, but "
        f"TRIALS_DIR={trials} is not mounted into env-server: add the volume '{trials}:{trials}' (same absolute "
        "path on both sides) to env-server"
    )
    assert check_trials_dir(trials, containerised=True, mounts={trials}) == (
        f"trials    {trials} (writable, same path on host)"
    )
