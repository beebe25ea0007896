"""Start `vllm serve` with the flags the training path needs (see engine.command)."""

from __future__ import annotations

import os
import shlex
import sys

from engine.command import EnvError, build_command, build_environment


def main() -> None:
    try:
        argv = build_command(os.environ)
    except EnvError as exc:
        print(f"engine: refusing to start: {exc}", file=sys.stderr)
        sys.exit(2)
    env = build_environment(os.environ)
    if not env.get("HF_HOME"):
        print(
            "engine: warning: HF_HOME is unset; the model is downloaded into the container and lost with it",
            file=sys.stderr,
        )
    print("engine: " + shlex.join(argv), flush=True)
    os.execvpe(argv[0], argv, env)


if __name__ == "__main__":
    main()
