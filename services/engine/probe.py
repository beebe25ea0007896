"""The engine's healthcheck command: the probe (stack/serving/probe.py) against this container's engine, with
the launcher's turn-end and template records and the proof this container remembers.

Usage: python3 -m engine.probe [BASE_URL]   (default http://$ENGINE_HOST:$ENGINE_PORT). Exit 0 healthy, 1 not.
"""

from __future__ import annotations

import sys

from stack import fields
from stack.env import Env, EnvError
from stack.serving import chain, probe, turn_end


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    read = Env()
    try:
        base = (
            argv[0]
            if argv
            # Any host the engine binds (a pod's address on Kubernetes), not only the loopback choices.
            else f"http://{read.text('ENGINE_HOST', fields.ENGINE_HOST.default)}:{read.get(fields.ENGINE_PORT)}"
        )
    except EnvError as exc:
        print(f"engine UNHEALTHY: {exc}")
        return 1
    try:
        print(
            probe.probe(
                base,
                accepted_for=read.text(probe.UNPROVEN_OK),
                proven_file=probe.PROVEN_FILE,
                turn_end_file=turn_end.RECORD,
                chain_file=chain.RECORD,
            )
        )
        return 0
    except probe.Unhealthy as exc:
        print(f"engine UNHEALTHY: {exc}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
