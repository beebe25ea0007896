"""The project's trainer on a GPU with scripted agent rollouts through the capture proxy:

    python tests/gpu/run_trainer.py CAPTURE_URL

The same entry as `python -m trainer` (guards, run name, warm-up rollout, AsyncGRPOTrainer with the weight transfer
WEIGHT_TRANSFER names: TRL's NCCL client in the two-GPU form, vLLM's CUDA-IPC in the one-GPU form; regional compile,
startup memory report) with two stand-ins, both for things the GPU machine cannot reach:
- rollouts: the CPU test's scripted agent (tests/integration/trainer/scripted_agent.py) instead of the env
  server + sandbox + mini-swe-agent; every model call still goes through OpenEnv's capture proxy to vLLM;
- attention kernel: TRL fetches FlashAttention-3 from the Hugging Face Hub at first use; without network the
  benchmark's swap to PyTorch's own FlashAttention-2 varlen kernel is installed (checked against a dense
  path-mask reference by the benchmark). Its name is printed; the check records it.
Last it prints the trainer's own torch peak (reserved and allocated), which the check records beside NVML's.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration" / "trainer"))
# The repository root, for the benchmark's FA2 varlen kernel (benchmarks/ is in no image).
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from scripted_agent import ScriptedAgentRunner  # noqa: E402

from benchmarks.trainer_gpu import attention  # noqa: E402
from guards.checks import run_all  # noqa: E402
from stack.readers.trainer import from_env  # noqa: E402
from trainer.train import run  # noqa: E402

NUDGE = "Use the bash tool: reply with a <tool_call>."

if __name__ == "__main__":
    failures = run_all(phase="trainer")
    if failures:
        sys.exit("\n".join(str(f) for f in failures))
    print(f"trainer attention kernel: {attention.install()}", flush=True)
    settings = from_env()
    try:
        run(settings, runner=ScriptedAgentRunner(capture_url=sys.argv[1], model=settings.model, nudge=NUDGE))
    finally:
        # The trainer's own view of its peak, beside what NVML lists per process (which a sandbox's PID namespace
        # can hide): the allocator's reserved peak is what an out-of-memory is decided on.
        import torch

        if torch.cuda.is_available():
            print(
                f"trainer torch peak: reserved {torch.cuda.max_memory_reserved() // 2**20} MiB, "
                f"allocated {torch.cuda.max_memory_allocated() // 2**20} MiB",
                flush=True,
            )
