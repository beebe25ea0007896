"""The AsyncGRPOConfig the trainer builds (train.trl_config) carries issue 31's defaults to TRL.

tests/integration/trainer/test_weights_move.py steps an optimizer from precision.trl_kwargs() and
tests/unit/trainer/test_staleness.py checks staleness.max_staleness_for; this checks the one place both reach TRL,
so dropping either from trl_config fails here: float32 parameters and AdamW state with bf16 autocast on the GPU
(nccl), and max_staleness 16 at the production batch shape (TRL's own default, 4, dropped ~60% of samples there).
The CPU form (compose.cpu.yaml: TOKEN_BUDGET=0, PER_DEVICE_TRAIN_BATCH_SIZE = NUM_GENERATIONS = 2) trains one
whole group per step, where TRL's 4 already fits.

Runs in the trainer image: tests/run-in-image trainer -q tests/integration/trainer/test_production_trl_config.py
"""

import transformers
import transformers.training_args

from stack.readers import trainer as config
from trainer import train


def trl(tmp_path, **env):
    s = config.from_env({"BUCKET_DIR": str(tmp_path), **env})
    return train.trl_config(s, "none", {}, cpu=s.weight_transfer != "nccl")


def test_production_defaults_reach_trl(tmp_path, monkeypatch):
    # The config is TRL's real one; only transformers' "is there a bf16 GPU" check is answered yes, as on the card.
    monkeypatch.setattr(transformers.training_args, "is_torch_bf16_gpu_available", lambda: True)
    args = trl(tmp_path)
    assert (args.dtype, args.bf16, args.fp16) == ("float32", True, False)
    assert (args.learning_rate, args.max_staleness, args.token_budget) == (1e-6, 16, 32768)
    assert args.lr_scheduler_type == "constant"  # TRL's own default: production runs are not decayed unasked


def test_a_decaying_schedule_reaches_the_scheduler_trl_builds(tmp_path):
    # The learning gate's schedule (compose.learn.yaml): cosine from LEARNING_RATE at the first step to ~0 at the last.
    import torch

    args = trl(tmp_path, WEIGHT_TRANSFER="mock", LR_SCHEDULER="cosine", LEARNING_RATE="3e-4", MAX_STEPS="15")
    assert args.lr_scheduler_type == "cosine"
    opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=args.learning_rate)
    sched = transformers.get_scheduler(args.lr_scheduler_type, opt, num_warmup_steps=0, num_training_steps=15)
    lrs = []
    for _ in range(15):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs[0] == 3e-4 and lrs == sorted(lrs, reverse=True) and lrs[-1] < 3e-4 * 0.02, lrs


def test_cpu_form_defaults_reach_trl(tmp_path):
    env = {"WEIGHT_TRANSFER": "mock", "NUM_GENERATIONS": "2", "TOKEN_BUDGET": "0", "PER_DEVICE_TRAIN_BATCH_SIZE": "2"}
    args = trl(tmp_path, **env)
    assert (args.dtype, args.bf16, args.max_staleness) == ("float32", False, 4)
