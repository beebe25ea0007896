"""The atomic JSON write and the mountinfo parser."""

from __future__ import annotations

import json
import os
import stat

import pytest

from stack import atomic, mountinfo


def test_write_json_replaces_whole_and_leaves_no_temp_file(tmp_path):
    path = tmp_path / "deep" / "status.json"
    atomic.write_json(path, {"step": 1})
    atomic.write_json(path, {"step": 2, "b": [1]}, indent=1, sort_keys=True)
    assert json.loads(path.read_text()) == {"b": [1], "step": 2}
    assert path.read_text().startswith('{\n "b"')
    assert sorted(p.name for p in path.parent.iterdir()) == ["status.json"]
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644


def test_a_failed_write_keeps_the_old_document_and_no_temp_file(tmp_path):
    path = tmp_path / "capture_url.json"
    atomic.write_json(path, {"state": "verified"})
    with pytest.raises(TypeError):
        atomic.write_json(path, {"bad": object()})
    assert json.loads(path.read_text()) == {"state": "verified"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["capture_url.json"]


def test_write_bytes_writes_them_unchanged(tmp_path):
    data = bytes(range(256)) + b"\r\n\n"  # no newline translation, no encoding
    atomic.write_bytes(tmp_path / "curve.png", data)
    atomic.write_bytes(tmp_path / "curve.png", data * 2)
    assert (tmp_path / "curve.png").read_bytes() == data * 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["curve.png"]
    assert stat.S_IMODE(os.stat(tmp_path / "curve.png").st_mode) == 0o644


MOUNTINFO = (
    "114 51 254:0 /tmp/plain\\040bucket /bucket rw,relatime - ext4 /dev/vda rw,discard\n"
    "117 51 254:0 /var/lib/docker/containers/1c4b/hostname /etc/hostname rw,relatime - ext4 /dev/vda rw\n"
    "130 51 0:61 / /var/lib/asyncgrpo-harbor/trials rw - fuse.gcsfuse my-bucket rw\n"
    "garbage line without the separator\n"
)


def test_parse_unescapes_and_skips_garbage():
    mounts = mountinfo.parse(MOUNTINFO)
    assert [m.mount_point for m in mounts] == ["/bucket", "/etc/hostname", "/var/lib/asyncgrpo-harbor/trials"]
    bucket = mountinfo.mount_at(mounts, "/bucket")
    assert bucket.root == "/tmp/plain bucket" and bucket.device == "254:0" and bucket.fstype == "ext4"
    assert mountinfo.mount_at(mounts, "/var/lib/asyncgrpo-harbor/trials").is_network_or_fuse
    assert mountinfo.mount_points(mounts) == {"/bucket", "/etc/hostname", "/var/lib/asyncgrpo-harbor/trials"}


def test_read_the_real_file_of_this_process():
    assert "/" in mountinfo.mount_points(mountinfo.read())


def test_container_id_from_dockers_own_bind_mounts():
    cid = "ab" * 32
    inside = mountinfo.parse(
        f"612 600 0:52 /var/lib/docker/containers/{cid}/hostname /etc/hostname rw - ext4 /dev/sda1 rw\n"
        f"613 600 0:52 /var/lib/docker/containers/{cid}/hosts /etc/hosts rw - ext4 /dev/sda1 rw"
    )
    assert mountinfo.container_id(inside) == cid
    # A bucket folder that happens to live under another container's folder says nothing about us.
    elsewhere = mountinfo.parse(f"614 600 0:52 /var/lib/docker/containers/{cid}/x /bucket rw - ext4 /dev/sda1 rw")
    assert mountinfo.container_id(elsewhere) == ""
    assert mountinfo.container_id(mountinfo.parse("1 0 8:1 / / rw - ext4 /dev/sda1 rw")) == ""
