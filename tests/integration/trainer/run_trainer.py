"""Run the real trainer (guards, warm-up, AsyncGRPOTrainer) with the scripted agent as its rollout runner.

    python tests/integration/trainer/run_trainer.py CAPTURE_URL

Everything else comes from the environment, exactly as `python -m trainer` reads it, plus two test hooks:
TEST_SIGTERM_AT_STEP=N sends this process SIGTERM during step N's optimizer step (its rollouts are in, so
the signal lands while the step computes, not while rollouts are awaited), as `docker compose stop` would.
TEST_KILL_ENGINE_AT_STEP=N with TEST_ENGINE_PID kills that process (the mock engine) with SIGKILL at the same
point, so the weight push at step N's end finds the engine gone.
"""

import json
import os
import signal
import sys

from scripted_agent import ScriptedAgentRunner

from guards.checks import run_all
from stack.readers.trainer import from_env
from trainer.train import run


def signal_during_step(at: int) -> None:
    """Replace trainer.watch.stop.StopCallback with a subclass that only adds the signal: the guard under test
    (its on_step_end, and the handler trainer.train.main installs) stays the real one."""
    from trainer.watch import stop

    class SignalDuringStep(stop.StopCallback):
        def on_optimizer_step(self, args, state, control, **kwargs):
            if state.global_step == at - 1:  # counted up after the optimizer step
                os.kill(os.getpid(), signal.SIGTERM)

    stop.StopCallback = SignalDuringStep
    stop.install()


def kill_engine_during_step(at: int, pid: int) -> None:
    """As signal_during_step, with the engine as the victim: StopCallback stays the real one."""
    from trainer.watch import stop

    class KillEngineDuringStep(stop.StopCallback):
        def on_optimizer_step(self, args, state, control, **kwargs):
            if state.global_step == at - 1:
                os.kill(pid, signal.SIGKILL)
                print(f"test: killed the engine (pid {pid}) in step {at}'s optimizer step", flush=True)

    stop.StopCallback = KillEngineDuringStep


if __name__ == "__main__":
    if os.environ.get("TEST_SIGTERM_AT_STEP"):
        signal_during_step(int(os.environ["TEST_SIGTERM_AT_STEP"]))
    if os.environ.get("TEST_KILL_ENGINE_AT_STEP"):
        kill_engine_during_step(int(os.environ["TEST_KILL_ENGINE_AT_STEP"]), int(os.environ["TEST_ENGINE_PID"]))
    failures = run_all(phase="trainer")
    if failures:
        sys.exit("\n".join(str(f) for f in failures))
    settings = from_env()
    tasks = json.loads(os.environ.get("SCRIPTED_AGENT_TASKS") or "null")  # the task instructions, when not the default
    extra = {"tasks": tuple(tasks)} if tasks else {}
    run(settings, runner=ScriptedAgentRunner(capture_url=sys.argv[1], model=settings.model, **extra))
