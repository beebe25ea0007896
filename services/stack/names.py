"""Names that become folders under the bucket (RUN_NAME, an evaluation's --name, STACK_NAME), checked by one
rule wherever they are read: a name stays inside its parent folder and does not land on a file.

`scripts/evaluate --name ../../x` wrote outside the bucket, an empty name wrote into `evals/` itself, and a
RUN_NAME naming an existing file passed preflight and ended in the trainer as a FileExistsError traceback.
Standard library only, like the rest of `stack`.
"""

from __future__ import annotations

import re
from pathlib import Path

# Letters and digits first (no leading '.' or '-': no '..', no hidden folder, no option), then letters, digits,
# '.', '_' and '-'; no separator of any system. 128 characters: well inside every filesystem's 255 bytes.
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
RULE = "letters, digits, '.', '_' and '-', starting with a letter or digit, at most 128 characters (no '/', no '..')"


def problem(what: str, name: str, parent: str | Path | None = None, *, fix: str = "") -> str | None:
    """Why `name` cannot be a folder under `parent` (one line naming `what`, e.g. RUN_NAME or --name), or None.

    `fix` is the alternative the line offers (e.g. "or leave it empty for a fresh name")."""
    tail = f", {fix}" if fix else ""
    if not name:
        return f"{what} is empty: give it a name of {RULE}{tail}"
    if not NAME_RE.match(name):
        return f"{what}={name!r} is not a usable folder name: use {RULE}{tail}"
    if parent is not None:
        path = Path(parent) / name
        if path.exists() and not path.is_dir():
            return f"{what}={name!r} names {path}, which is a file, not a folder: choose another name or move that file"
    return None
