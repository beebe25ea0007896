"""mini-swe-agent 2.4.6 on one task with its local environment: what `mini-swe-agent --yolo --exit-immediately
-c mini.yaml` runs in a Harbor sandbox, without the interactive shell around it.

    python learn_mini.py TASK_FILE STEP_LIMIT MODEL OUTPUT   (run by learn_agent.py inside the rollout's namespace)

It builds the agent the way mini-swe-agent's own CLI does (`minisweagent/run/mini.py` `main`, read at 2.4.6): the
packaged `mini.yaml`, then the overrides Harbor passes (the model `openai/<served name>`, the step limit OpenEnv's
seam sets, no cost limit: a local model has no price), `get_model`, `get_environment(default_type="local")` with
cwd /app (the task image's WORKDIR), `get_agent`. The CLI's agent is `interactive`, whose yolo mode with
`--exit-immediately` is the default agent's loop plus a console echo and a prompt_toolkit session; the default
agent is taken here, which needs no terminal. The model class is the CLI's own (litellm's `openai/` provider,
reading OPENAI_API_BASE and the session key from the environment, as OpenEnv's mini-swe-agent seam sets them).
"""

from __future__ import annotations

import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    task_file, step_limit, model, output = argv
    from minisweagent.agents import get_agent
    from minisweagent.config import get_config_from_spec
    from minisweagent.environments import get_environment
    from minisweagent.models import get_model
    from minisweagent.utils.serialize import recursive_merge

    config = recursive_merge(
        get_config_from_spec("mini.yaml"),
        {
            "agent": {"step_limit": int(step_limit), "cost_limit": 0, "output_path": Path(output)},
            "model": {"model_name": f"openai/{model}", "model_class": "litellm"},
            "environment": {"environment_class": "local", "cwd": "/app"},
        },
    )
    model_obj = get_model(config=config.get("model", {}))
    env = get_environment(config.get("environment", {}), default_type="local")
    agent = get_agent(model_obj, env, config.get("agent", {}), default_type="default")
    result = agent.run(Path(task_file).read_text())
    print(f"learn-mini: exit_status={result.get('exit_status')} calls={agent.n_calls}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
