"""Free space where a folder is, or will be once made: one definition for preflight's disk guards (guards/disk.py,
the bucket; guards/checks.py, the trials folder) and the env server's own start (env_server/trials.py).
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
