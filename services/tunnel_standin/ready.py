"""`python -m tunnel_standin.ready`: the stand-in's healthcheck, the counterpart of
`cloudflared tunnel --metrics 127.0.0.1:<port> ready` (exit 0 only when /ready answers 200, i.e.
a tunnel connection is registered). Like cloudflared's, it says nothing about the origin: that is
tunnel-check's job. stdlib only, so the check costs one short process."""

from __future__ import annotations

import sys
import urllib.error
import urllib.request

from stack.env import Env, EnvError
from stack.fields import TUNNEL_METRICS_PORT


def main() -> int:
    try:
        port = Env().get(TUNNEL_METRICS_PORT)
    except EnvError as exc:
        print(f"not ready: {exc}")
        return 1
    url = f"http://127.0.0.1:{port}/ready"
    try:
        with urllib.request.urlopen(url, timeout=3) as resp:
            print(f"ready: {url} -> {resp.status} {resp.read(200).decode(errors='replace')}")
            return 0
    except urllib.error.HTTPError as exc:
        print(f"not ready: {url} -> {exc.code} {exc.read(200).decode(errors='replace')}")
    except (urllib.error.URLError, OSError) as exc:
        print(f"not ready: {url} unreachable ({exc}); is the stand-in running?")
    return 1


if __name__ == "__main__":
    sys.exit(main())
