"""Run the real trainer (guards, warm-up, AsyncGRPOTrainer) with the scripted agent as its rollout runner.

    python tests/integration/trainer/run_trainer.py CAPTURE_URL

Everything else comes from the environment, exactly as `python -m trainer` reads it.
"""

import json
import os
import sys

from scripted_agent import ScriptedAgentRunner

from guards.checks import run_all
from trainer.config import from_env
from trainer.train import run

if __name__ == "__main__":
    failures = run_all(phase="trainer")
    if failures:
        sys.exit("\n".join(str(f) for f in failures))
    settings = from_env()
    tasks = json.loads(os.environ.get("SCRIPTED_AGENT_TASKS") or "null")  # the task instructions, when not the default
    extra = {"tasks": tuple(tasks)} if tasks else {}
    run(settings, runner=ScriptedAgentRunner(capture_url=sys.argv[1], model=settings.model, **extra))
