"""Start `vllm serve` with the flags the training path needs (see engine.command), stopping turns where
the chat template ends them (engine.turn_end, engine.stops)."""

from __future__ import annotations

import os
import shlex
import sys

from engine import turn_end
from engine.command import EnvError, build_command, build_environment


def main() -> None:
    try:
        build_command(os.environ)  # every setting checked before the tokenizer is fetched
        from engine import stops

        plan, generation_config = stops.prepare(os.environ)
        argv = build_command(os.environ, generation_config)
    except EnvError as exc:
        print(f"engine: refusing to start: {exc}", file=sys.stderr)
        sys.exit(2)
    env = build_environment(os.environ)
    if not env.get("HF_HOME"):
        print(
            "engine: warning: HF_HOME is unset; the model is downloaded into the container and lost with it",
            file=sys.stderr,
        )
    line = plan.line()
    turn_end.write_record(line)  # the healthcheck's probe repeats it
    print(f"engine: {line}", flush=True)
    print("engine: " + shlex.join(argv), flush=True)
    os.execvpe(argv[0], argv, env)


if __name__ == "__main__":
    main()
