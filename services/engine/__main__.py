"""Start `vllm serve` with the flags the training path needs (see engine.command), serving a chat template
under which turns chain (stack.serving.served_template: proven at start, refused in one line when they fork) and
stopping turns where that template ends them (stack.serving.turn_end, engine.stops)."""

from __future__ import annotations

import os
import shlex
import sys

from engine.command import EnvError, build_command, build_environment
from stack.serving import chain, turn_end


def main() -> None:
    try:
        build_command(os.environ)  # every setting checked before the tokenizer is fetched
        from engine import stops
        from stack.serving import served_template

        loaded = stops.load_tokenizer(os.environ)
        served = served_template.prepare(os.environ, loaded.tokenizer, loaded.operator_template, loaded.why)
        plan, generation_config = stops.prepare(os.environ, loaded=loaded)
        argv = build_command(os.environ, generation_config, served.path)
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
    chain.write_record(served.line())  # and this one, which scripts/status shows too
    print(f"engine: {line}", flush=True)
    print(f"engine: {served.line()}", flush=True)
    print("engine: " + shlex.join(argv), flush=True)
    os.execvpe(argv[0], argv, env)


if __name__ == "__main__":
    main()
