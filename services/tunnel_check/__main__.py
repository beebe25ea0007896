"""`python -m tunnel_check`: run the monitor until SIGTERM/SIGINT, then withdraw the URL."""

from __future__ import annotations

import logging
import signal
import sys

from stack.readers.tunnel_check import EnvError, load


def main() -> int:
    logging.basicConfig(
        stream=sys.stdout,
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # httpx logs every request at INFO: one line per check is the monitor's own job.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    try:
        settings = load()
    except EnvError as exc:
        for problem in exc.problems:  # every bad value at once, one line each
            print(f"tunnel-check: configuration error: {problem}", file=sys.stderr)
        return 2
    from .monitor import Monitor

    monitor = Monitor(settings)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: monitor.stop())
    monitor.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
