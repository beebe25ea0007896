"""Free space where a folder is, or will be once made: one definition for preflight's disk guards (guards/disk.py,
the bucket; guards/checks.py, the trials folder) and the env server's own start (env_server/trials.py), and the
rule that the trials folder's disk keeps TRIALS_MAX_GB (`space_problem`), which both apply.
Standard library only, like the rest of `stack`."""

from __future__ import annotations

import os
from pathlib import Path


def free_bytes_at(where: str) -> int:
    """Bytes an unprivileged writer may still use on the filesystem that holds `where` (its nearest existing
    folder: a folder not made yet is made on its parent's filesystem)."""
    path = Path(where)
    while not path.exists() and path != path.parent:
        path = path.parent
    stat = os.statvfs(path)
    return stat.f_bavail * stat.f_frsize


GB = 1024**3


def folder_bytes(path: str) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def space_problem(trials_dir: str, max_gb: float, free_bytes: int, held_bytes: int = 0) -> str | None:
    """Why the disk at `trials_dir` cannot keep the TRIALS_MAX_GB the settings promise (one line naming the fix),
    or None. `held_bytes`: what finished trial folders there already hold (they count toward the cap)."""
    if not max_gb:
        return None  # no size cap: nothing promised (TRIALS_KEEP alone bounds the folders)
    need = max_gb * GB - held_bytes
    if free_bytes >= need:
        return None
    held = f", with {held_bytes / GB:.1f} GB already held by finished trial folders" if held_bytes else ""
    room = (free_bytes + held_bytes) / GB
    lower = f"lower TRIALS_MAX_GB to at most {room:.1f}, " if room >= 0.1 else ""
    return (
        f"TRIALS_MAX_GB={max_gb:g} lets trial folders grow to {max_gb:g} GB in {trials_dir}, but only "
        f"{free_bytes / GB:.1f} GB is free there{held}: free space on that disk, {lower}or set TRIALS_DIR to a "
        "folder on a larger disk"
    )
