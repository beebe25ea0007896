"""What a killed rollout leaves besides its sandbox, removed when env-server starts: its task image tag
(SANDBOX=docker) and its unfinished trial folder. sandboxes.py reaps the containers and networks.

Images: Harbor 0.25.0's docker environment builds each rollout's `main` service from
`docker-compose-build.yaml`, which names no `image:`, so compose tags the build `<project>-main` (the
project is the sanitised `<trial_name>__env`, `<stack>--<task>-<hex8>__env` under this stack's prefix). A
rollout that ends normally removes it (`down --rmi local` in `DockerEnvironment.stop(delete=True)`); one
whose env server was killed leaves the tag, one per rollout in flight. The build comes from the layer cache,
so the tag usually names the same image as the task's prebuild (prebuild.py, `<stack>--<task>-prebuild__env-
main`), which is kept: removing a tag removes an image only when no other tag holds it.

Trial folders: one without `result.json` (trials.py) under this stack's prefix belongs to a rollout that
never finished; at start none of this stack's rollouts can be running, so each is a leftover.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from stack.backends import SANDBOXES

from .trials import trial_folders

PREBUILD_MARK = "-prebuild__env-"


def _docker(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=120)


def rollout_image_tags(listing: str, prefix: str) -> list[str]:
    """The `repo:tag` lines of `docker images --format '{{.Repository}}:{{.Tag}}'` that a rollout of this
    stack built (not a prebuild's)."""
    tags = []
    for line in listing.splitlines():
        repo = line.strip().rpartition(":")[0]
        if repo.startswith(prefix + "-") and PREBUILD_MARK not in repo:
            tags.append(line.strip())
    return tags


def reap_images(prefix: str) -> tuple[int, list[str]]:
    """Untag every rollout image of this stack; returns (how many, problems)."""
    listed = _docker("images", "--format", "{{.Repository}}:{{.Tag}}")
    if listed.returncode != 0:
        return 0, [f"docker images failed: {listed.stderr.strip()[:200]}"]
    tags = rollout_image_tags(listed.stdout, prefix)
    problems = []
    for tag in tags:
        gone = _docker("rmi", tag)
        if gone.returncode != 0:
            problems.append(f"{tag}: {gone.stderr.strip()[:200]}")
    return len(tags) - len(problems), problems


def reap_trial_folders(trials_dir: str, prefix: str) -> int:
    _, unfinished = trial_folders(Path(trials_dir), prefix)
    for name in unfinished:
        shutil.rmtree(Path(trials_dir) / name, ignore_errors=True)
    return len(unfinished)


def reap(sandbox: str, prefix: str, trials_dir: str) -> str:
    """The startup report line. Never fatal."""
    parts = []
    try:
        parts.append(f"{reap_trial_folders(trials_dir, prefix)} unfinished trial folder(s)")
    except OSError as exc:
        parts.append(f"trial folders not checked ({type(exc).__name__}: {exc})")
    if SANDBOXES.get(sandbox).host_docker:
        try:
            count, problems = reap_images(prefix)
            parts.append(f"{count} rollout image tag(s)")
            if problems:
                parts.append(f"{len(problems)} tag(s) would not go: {'; '.join(problems[:3])}")
        except (OSError, subprocess.SubprocessError) as exc:
            parts.append(f"images not checked ({type(exc).__name__}: {str(exc)[:160]})")
    return f"reaped    {', '.join(parts)} that killed rollouts of stack '{prefix}' left behind"
