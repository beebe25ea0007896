"""TRAIN_SCRIPT: run another training script than the canonical one, from a mounted path or a URL.

Resolved and compiled at startup, so a stale URL or a typo fails in seconds (in preflight, before the
engine loads) instead of minutes into a paid run. A URL is fetched once into the run's folder and that
copy is what runs, so the script cannot change under a resumed run.

    python -m trainer.train_script SPEC      preflight's check (guards runs it): the refusal's line and exit 1
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse


class TrainScriptError(ValueError):
    pass


@dataclass(frozen=True)
class Resolved:
    origin: str  # what TRAIN_SCRIPT said
    source: str  # the script's text


def resolve(spec: str, timeout_s: float = 15.0) -> Resolved:
    import requests  # lazily: the mount probe must run where requests is absent

    spec = spec.strip()
    scheme = urlparse(spec).scheme
    if scheme in ("http", "https"):
        try:
            response = requests.get(spec, timeout=timeout_s)
        except requests.RequestException as exc:
            raise TrainScriptError(
                f"TRAIN_SCRIPT={spec} cannot be fetched ({type(exc).__name__}): fix the URL or unset TRAIN_SCRIPT"
            ) from exc
        if response.status_code != 200:
            raise TrainScriptError(
                f"TRAIN_SCRIPT={spec} answered HTTP {response.status_code}: fix the URL (a raw file URL, not a "
                "web page) or unset TRAIN_SCRIPT"
            )
        text = response.text
        if "html" in response.headers.get("content-type", "").lower() or text.lstrip()[:15].lower().startswith(
            ("<!doctype", "<html")
        ):
            raise TrainScriptError(
                f"TRAIN_SCRIPT={spec} returned an HTML page, not a Python file: use the raw URL "
                "(e.g. raw.githubusercontent.com/...) or unset TRAIN_SCRIPT"
            )
    elif scheme in ("", "file"):
        path = Path(urlparse(spec).path if scheme == "file" else spec)
        if not path.is_file():
            raise TrainScriptError(
                f"TRAIN_SCRIPT={spec} is not a file inside the container: mount it (e.g. under /bucket) and give "
                "its in-container path, or unset TRAIN_SCRIPT"
            )
        try:
            text = path.read_text()
        except OSError as exc:
            raise TrainScriptError(
                f"TRAIN_SCRIPT={spec} is not readable ({exc.strerror}): fix its permissions"
            ) from exc
    else:
        raise TrainScriptError(
            f"TRAIN_SCRIPT={spec} has scheme {scheme!r}: give an in-container path or an http(s) URL"
        )
    try:
        compile(text, spec, "exec")
    except SyntaxError as exc:
        raise TrainScriptError(
            f"TRAIN_SCRIPT={spec} is not valid Python (line {exc.lineno}: {exc.msg}): fix the script or unset TRAIN_SCRIPT"
        ) from exc
    return Resolved(spec, text)


def materialize(resolved: Resolved, run_dir: str | os.PathLike) -> Path:
    """Write the script into the run's folder; a resumed run reuses the copy it started with."""
    target = Path(run_dir) / "train_script.py"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(resolved.source)
    return target


def main(argv: list[str] | None = None) -> int:
    """Resolve SPEC as the trainer will; print the refusal's one line and exit 1, or exit 0. Guards runs this
    instead of importing the trainer: the fetch needs requests, which stack (all guards imports) does not carry."""
    (spec,) = sys.argv[1:] if argv is None else argv
    try:
        resolve(spec)
    except TrainScriptError as exc:
        print(exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
