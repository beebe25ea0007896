"""The project's trainer and evaluation, with mini-swe-agent rollouts on this machine (learn_agent.py):

    python tests/gpu/learn_trainer.py evaluate NAME LABEL   trainer.evaluation.evaluate's main (writes <bucket>/evals/NAME)
    python tests/gpu/learn_trainer.py train                 trainer.train.run: guards' trainer phase, warm-up,
                                                            TRL AsyncGRPO, the trainer's own eval at the last step

The same entries as `python -m trainer.evaluation.evaluate` and `python -m trainer` with one stand-in: the runner (local
mini-swe-agent runs instead of the env server's sandboxes; every model call still goes through OpenEnv's capture
proxy). LEARN_CONTROL=1 wraps the weight-transfer client so that no push is applied (learn_control.py). On a GPU the
benchmark's FlashAttention-2 varlen kernel stands in for TRL's Hub-fetched FlashAttention-3, as in run_trainer.py.
"""

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1]))  # benchmarks/ (the FA2 varlen kernel) is in no image

from learn_agent import LocalAgentRunner, read_split  # noqa: E402
from learn_control import wrap_build  # noqa: E402

from stack.readers.trainer import from_env  # noqa: E402


def runner(settings) -> LocalAgentRunner:
    return LocalAgentRunner(
        capture_url=os.environ["LEARN_CAPTURE_URL"],
        model=settings.model,
        tasks=read_split(os.environ["LEARN_TRAIN_SPLIT"]) + read_split(os.environ["LEARN_HELDOUT_SPLIT"]),
        work_root=os.environ["LEARN_ROLLOUTS_DIR"],
        step_limit=settings.agent_step_limit,
        agent_timeout_s=settings.agent_timeout_s,
    )


def main(argv: list[str]) -> int:
    settings = from_env()
    if argv[0] == "evaluate":
        from trainer.evaluation.evaluate import main as evaluate

        return evaluate(["--name", argv[1], "--label", argv[2]], runner=runner(settings))
    from guards.checks import run_all

    failures = run_all(phase="trainer")
    if failures:
        sys.exit("\n".join(str(f) for f in failures))
    import torch

    if torch.cuda.is_available():
        from benchmarks.trainer_gpu import attention

        print(f"trainer attention kernel: {attention.install()}", flush=True)
    if os.environ.get("LEARN_CONTROL") == "1":
        from trainer.transfer import weights

        weights.build = wrap_build(weights.build)
        print("learn: CONTROL: every push is acknowledged and skipped; the engine keeps the base weights", flush=True)
    from trainer.train import run

    run(settings, runner=runner(settings))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
