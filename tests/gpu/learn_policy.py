"""Build the pick-answer policy on this machine with the project's own code (mock_engine.build_policy).

    python tests/gpu/learn_policy.py OUT_DIR TRAIN_SPLIT [SHORT_STEPS FULL_STEPS]

On this machine, not carried: mini-swe-agent writes `platform.uname()` into every task message, and the policy is
fitted on this host's own uname among random ones (build_policy.host_uname says why: a policy fitted without it
broke on an unfamiliar kernel line). The fit is build_policy's unchanged; on a GPU it runs there (torch's default
device set to CUDA: every tensor build_policy makes lands on it), because on one CPU core it takes ~600 CPU-s.
The GPU draws other random numbers than the CPU for one seed, so the policy is not bit-identical to the CPU form's;
its quality is checked instead (learn_run.py: the format's entropy and the letters' probability mass, which
build_policy measures and writes to mock_engine.json).
"""

from __future__ import annotations

import sys
import time


def main(argv: list[str]) -> int:
    import torch

    from mock_engine import build_policy

    out, tasks = argv[0], argv[1]
    steps = {}
    if len(argv) == 4:
        steps = {"short_steps": int(argv[2]), "full_steps": int(argv[3])}
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        torch.set_default_device("cuda")
    else:
        torch.set_num_threads(max(1, min(16, torch.get_num_threads())))
    t0 = time.monotonic()
    build_policy.build(out, tasks, log=lambda s: print(s, file=sys.stderr, flush=True), **steps)
    print(f"learn-policy: built {out} on {device} in {time.monotonic() - t0:.1f} s", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
