"""/proc/self/mountinfo, parsed: what is mounted where, from which filesystem, and which part of it.

The guards use it to tell a real bucket mount from the empty folder Docker creates; env-server uses it
to check that TRIALS_DIR is bound at its own path.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

MOUNTINFO = "/proc/self/mountinfo"
# Docker bind-mounts a container's own /etc/hostname, /etc/hosts and /etc/resolv.conf from
# /var/lib/docker/containers/<id>/: the one place a process sees its container's id. Not the hostname:
# on `network_mode: host` a container's hostname is the host's.
_CONTAINER_ID = re.compile(r"/containers/([0-9a-f]{64})/")
_DOCKER_FILES = ("/etc/hostname", "/etc/hosts", "/etc/resolv.conf")

_NETWORK_FSTYPES = ("nfs", "nfs4", "cifs", "smb3", "smbfs", "ceph", "glusterfs", "lustre", "9p", "virtiofs", "afs")


@dataclass(frozen=True)
class Mount:
    mount_id: str
    device: str  # major:minor
    root: str
    mount_point: str
    fstype: str
    source: str

    @property
    def is_network_or_fuse(self) -> bool:
        return self.fstype.startswith("fuse") or self.fstype in _NETWORK_FSTYPES


def _unescape(field: str) -> str:
    # mountinfo octal-escapes space, tab, newline and backslash.
    return field.encode().decode("unicode_escape") if "\\" in field else field


def parse(text: str) -> list[Mount]:
    mounts = []
    for line in text.splitlines():
        if " - " not in line:
            continue
        left, right = line.split(" - ", 1)
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 2:
            continue
        mounts.append(Mount(fields[0], fields[2], _unescape(fields[3]), _unescape(fields[4]), tail[0], tail[1]))
    return mounts


def read(path: str | os.PathLike = MOUNTINFO) -> list[Mount]:
    return parse(Path(path).read_text())


def mount_at(mounts: list[Mount], mount_point: str) -> Mount | None:
    """The mount visible at `mount_point` (the last one listed wins: later mounts shadow earlier)."""
    found = None
    for mount in mounts:
        if mount.mount_point == mount_point:
            found = mount
    return found


def mount_points(mounts: list[Mount]) -> set[str]:
    return {m.mount_point for m in mounts}


def container_id(mounts: list[Mount]) -> str:
    """This process's Docker container id, or "" outside a Docker container."""
    for mount in mounts:
        if mount.mount_point in _DOCKER_FILES:
            match = _CONTAINER_ID.search(mount.root)
            if match:
                return match.group(1)
    return ""
