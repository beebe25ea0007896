"""Is the bucket a real mount, or the empty folder Docker made when BUCKET_PATH did not exist?

From inside the container /bucket is ALWAYS a mount point (it is a bind), so `os.path.ismount` says
nothing. What tells the two apart is the bind's source, visible in /proc/self/mountinfo:

- `root` is the path of the bind's source *inside its filesystem*. A host path that was itself a mount
  point (a gcsfuse/NFS bucket, a dedicated disk) is the root of that filesystem, so `root` is "/".
- A network or FUSE filesystem type (fuse.gcsfuse, nfs4, cifs, ...) is a bucket whatever its root.
- A plain folder has `root` like "/mnt/bucket" on the host's filesystem. When that filesystem is the
  one Docker keeps its own per-container files on (/etc/hostname is bound from there), the folder
  lives on the host's root disk: exactly what `docker compose up` leaves behind when the bucket was
  never mounted, and checkpoints written there vanish with the VM.

In a Kubernetes pod the bucket is a PersistentVolumeClaim, and the same reading holds (an NFS/CSI/FUSE
type, or the root of a disk). An `emptyDir` is the kubelet binding a folder of its own,
`.../pods/<uid>/volumes/kubernetes.io~empty-dir/<name>`, deleted with the pod; it is refused by that
path whatever disk it is on (a kubelet on its own disk would otherwise pass as "a separate filesystem").
"""

from __future__ import annotations

from stack.mountinfo import Mount, mount_at

# The kubelet keeps every emptyDir under this folder (medium: Memory is a tmpfs, refused as such).
EMPTY_DIR_MARK = "/volumes/kubernetes.io~empty-dir/"


def bucket_verdict(mounts: list[Mount], bucket_dir: str, kubernetes: bool = False) -> tuple[bool, str]:
    """(is a real mount, why). `why` is a short phrase for the failure line. `kubernetes` words the
    node-local folder case for a pod (a hostPath or local-path volume) instead of a Docker bind."""
    mount = mount_at(mounts, bucket_dir)
    if mount is None:
        return False, f"{bucket_dir} is not a mount point at all (nothing is bound there)"
    if mount.fstype in ("tmpfs", "ramfs"):
        return False, f"it is a {mount.fstype} (memory) filesystem, gone with the container or the host"
    if EMPTY_DIR_MARK in mount.root:
        return False, f"it is a Kubernetes emptyDir ({mount.root}), deleted with the pod"
    if mount.is_network_or_fuse:
        return True, f"{mount.fstype} mount"
    if mount.root == "/":
        return True, f"the root of a {mount.fstype} filesystem ({mount.source})"
    docker_files = mount_at(mounts, "/etc/hostname")
    if docker_files is not None and docker_files.device == mount.device and kubernetes:
        return False, (
            f"it is the folder {mount.root} on the node's own disk ({mount.fstype}, device {mount.device}): "
            "a node-local volume (hostPath, local-path), lost with the node"
        )
    if docker_files is not None and docker_files.device == mount.device:
        return False, (
            f"it is the plain host folder {mount.root} on the host's root filesystem ({mount.fstype}, "
            f"device {mount.device}): the bucket was not mounted there, so Docker created an empty folder"
        )
    if docker_files is None:
        return False, f"it is the plain folder {mount.root} of a {mount.fstype} filesystem, not a mount of its own"
    # A folder on another local disk than Docker's: persistent, not the empty-folder accident.
    return True, f"folder {mount.root} on a separate {mount.fstype} filesystem ({mount.source})"
