"""Write a file so that a reader sees the old one or the new one, never half of one.

A half-written hand-off would read as "no URL" and refuse a rollout for nothing; a half-written status
or eval report (or the run's curve.png) would make `scripts/status` (or a resumed comparison) crash on a running trainer. Temp
file in the same folder, then rename (atomic on one filesystem).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path


def write_text(path: str | os.PathLike, text: str) -> None:
    _write(path, "w", text)


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    _write(path, "wb", data)


def _write(path: str | os.PathLike, mode: str, data: str | bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode) as fh:
            fh.write(data)
        # Readable by other services and by status, whatever user they run as (mkstemp makes it 0600).
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_json(path: str | os.PathLike, doc: object, *, indent: int | None = None, sort_keys: bool = False) -> None:
    # Serialised before the temp file exists: a document that cannot be written leaves nothing behind.
    write_text(path, json.dumps(doc, indent=indent, sort_keys=sort_keys))
