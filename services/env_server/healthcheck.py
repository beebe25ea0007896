"""`python -m env_server.healthcheck`: healthy when the capture proxy's /health and the Task API both answer.

The proxy must answer with its health document (an `instance` id), not merely accept a connection, and
the Task API must list the splits it serves (which exercises the dataset resolution behind it).
Exit 0 healthy, 1 not, with one line saying which part failed.
"""

from __future__ import annotations

import sys

import httpx

from stack import fields
from stack.env import Env, EnvError


def _host(read: Env, name: str) -> str:
    host = read.text(name, "127.0.0.1")
    return "127.0.0.1" if host == "0.0.0.0" else host


def check(timeout: float = 5.0) -> tuple[bool, str]:
    read = Env()
    try:
        capture_port = read.get(fields.CAPTURE_PORT)
        task_port = read.get(fields.ENV_SERVER_PORT)
    except EnvError as exc:
        return False, str(exc)
    capture = f"http://{_host(read, 'CAPTURE_HOST')}:{capture_port}/health"
    task_api = f"http://{_host(read, 'ENV_SERVER_HOST')}:{task_port}/harbor_env/splits"
    try:
        doc = httpx.get(capture, timeout=timeout).json()
    except (httpx.HTTPError, ValueError) as exc:
        return False, f"capture proxy {capture}: {type(exc).__name__}: {exc}"
    if not isinstance(doc, dict) or not doc.get("instance"):
        return False, f"capture proxy {capture}: answered without an instance id: {str(doc)[:120]}"
    try:
        resp = httpx.get(task_api, timeout=timeout)
        splits = resp.json()
    except (httpx.HTTPError, ValueError) as exc:
        return False, f"task api {task_api}: {type(exc).__name__}: {exc}"
    if resp.status_code != 200 or not isinstance(splits, list) or not splits:
        return False, f"task api {task_api}: HTTP {resp.status_code}, no splits: {str(splits)[:120]}"
    return True, f"ok: capture instance {doc['instance']}, {len(splits)} split(s)"


def main() -> None:
    ok, line = check()
    print(line)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
