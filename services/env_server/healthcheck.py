"""`python -m env_server.healthcheck`: healthy when the capture proxy's /health and the Task API both answer.

The proxy must answer with its health document (an `instance` id), not merely accept a connection, and
the Task API must list the splits it serves (which exercises the dataset resolution behind it).
Exit 0 healthy, 1 not, with one line saying which part failed.
"""

from __future__ import annotations

import http.client
import json
import sys
import urllib.error
import urllib.request

from stack import fields
from stack.env import Env, EnvError

# The standard library, not httpx: Docker runs this as a new process every 2 s in the CPU form (compose.cpu.yaml)
# and every 10 s in production, and `import httpx` (whose CLI module pulls in click and rich when they are
# installed, as in this image) took 0.4 of the 0.55 CPU-s a check cost in a fresh env-server container (about 0.3
# in the running one; 0.13 without it): a sixth of a core of a 2-core machine, taken from the rollouts, for as long
# as the stack runs (docs/LEARNING.md, the gate runs' CPU). No proxy either: the check is of this container's own
# loopback ports, which an HTTP(S)_PROXY in the environment must not reroute.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _host(read: Env, name: str) -> str:
    host = read.text(name, "127.0.0.1")
    return "127.0.0.1" if host == "0.0.0.0" else host


def _get_json(url: str, timeout: float) -> tuple[int, object]:
    """(HTTP status, the body parsed as JSON). Raises OSError (refused, reset, timed out), http.client's errors
    or ValueError (a body that is not JSON)."""
    try:
        with _OPENER.open(url, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:  # a status of 400 and up: still an answer, judged by the caller
        body = exc.read()
        try:
            return exc.code, json.loads(body)
        except ValueError:
            return exc.code, body.decode("utf-8", "replace")


_FAILED = (OSError, http.client.HTTPException, ValueError)


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
        _, doc = _get_json(capture, timeout)
    except _FAILED as exc:
        return False, f"capture proxy {capture}: {type(exc).__name__}: {exc}"
    if not isinstance(doc, dict) or not doc.get("instance"):
        return False, f"capture proxy {capture}: answered without an instance id: {str(doc)[:120]}"
    try:
        status, splits = _get_json(task_api, timeout)
    except _FAILED as exc:
        return False, f"task api {task_api}: {type(exc).__name__}: {exc}"
    if status != 200 or not isinstance(splits, list) or not splits:
        return False, f"task api {task_api}: HTTP {status}, no splits: {str(splits)[:120]}"
    return True, f"ok: capture instance {doc['instance']}, {len(splits)} split(s)"


def main() -> None:
    ok, line = check()
    print(line)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
