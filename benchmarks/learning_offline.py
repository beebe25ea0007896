"""Can the pick-answer policy learn, and on what budget? In-process, before the stack run is built.

    docker run --rm -v "$PWD":/w -w /w -e PYTHONPATH=/w/services:/w asyncgrpo-harbor/mock-engine-learn:local \\
        python -m benchmarks.learning_offline [--model-dir DIR] [--steps 15] [--lr 3e-4 0] [--threads 1]

What it prints, for each learning rate asked (0 is the control: the same loop, weights never move):
  base    valid-action fraction, rate of each letter, pass rate, on held-out tasks (T=1.0);
  curve   per step: pass rate of that step's own rollouts (train tasks), valid fraction, the
          engine-vs-trainer logprob mismatch (mean and max |diff| on the sampled tokens), seconds;
  after   the same held-out measurement as `base`, with pass@1's 95% Wilson interval for both.

The loop is the gate's in miniature: rollouts sampled by the mock engine's own code (`TinyLM.sample`,
nothing scripted) from a copy of the policy that only changes when weights are pushed into it;
group-normalised advantages ((r - mean) / (std + 1e-4) per group of one task's rollouts, TRL's
`scale_rewards="group"`); one on-policy optimizer step per batch (AdamW, TRL's defaults otherwise);
the loss summed over the sampled tokens and divided by their count; then the push (a copy of every
parameter into the engine's model, in float32, as the mock engine's weight route takes it).
`--dtype bf16` computes the trainer's forward under bfloat16 autocast with float32 master weights
(TRL's bf16=True path; issue 31's production path), `bf16-pure` keeps the weights themselves in
bfloat16 with no master copy (the regression issue 31 describes).

One shortcut, said plainly: a group shares its first prompt (~3.4k tokens of mini-swe-agent's
instructions), so the trainer encodes that prompt once without gradient and back-propagates through
the rest (the sampled turn). The real trainer also sends gradient
through the prompt's encoding; here that would cost 4-8x the CPU for the same letter-choice signal.

Measured (2026-12-01, --cpus=1 containers on a loaded 2-core host, --threads 1, one group of 8 per step,
eval n=32 held-out rollouts at T=1; the single-turn policy of mock_engine.build_policy):

  policy 400 short + 300 full SFT steps (format entropy max 0.51 nats; base valid 0.91, C 0.25)
    lr 1e-3, 12 steps   C learned by step 3, then the format went: step valid .50 .25 .75 .75 .13 .00;
                        held-out after: pass 0.094 [0.032, 0.242], valid 0.094
    lr 5e-4, 12 steps   step pass .13 .38 .75 .88 1.0 .75 1.0 .88 .88 1.0 1.0 .88;
                        held-out after: pass 0.625 [0.453, 0.771], valid 0.625 (format eroding)
  policy 300 short + 600 full SFT steps (the default: format entropy mean 2.9e-3, max 3.6e-2 nats;
  base valid 0.938, A .28 B .19 C .25 D .22, pass 0.250 [0.133, 0.421])
    lr 1e-3, 12 steps   step pass 0 .25 .38 .75 1.0 1.0 1.0 .88 1.0 .75 .88 .38, valid = pass from step 8;
                        held-out after: pass 0.344 [0.204, 0.517], valid 0.344 (format collapsed)
    lr 5e-4, 15 steps   step pass 0 .25 .25 .38 1.0 .63 1.0 .88 1.0 .88 1.0 1.0 .75 .63 1.0;
                        held-out after: pass 0.875 [0.719, 0.950], valid 0.906
    lr 3e-4, 15 steps   step pass 0 .25 .25 .38 .75 .63 .88 .88 .88 .88 1.0 .88 1.0 .88 1.0, valid 1.0
                        on every step but 1 (.63) and 8 (.88); held-out after: pass 0.875 [0.719, 0.950],
                        valid 0.938 (= base: format intact), A 0 B 0 C .88 D .06. Intervals separate.
    again, --seed 8     lr 3e-4: step pass .38 .38 .38 .25 .88 .50 .75 .75 .63 .88 1.0 1.0 .88 .88 1.0;
                        held-out after: pass 0.906 [0.758, 0.968], valid 0.938. lr 5e-4: held-out
                        after 0.875 [0.719, 0.950], valid 0.906 (step valid down to .63 and .75).
    lr 0 (control)      step pass 0 .25 .13 .25 .25 .50 .13 .25 .25 .13 .50 .13 .25 .25 .13 (mean 0.22);
                        held-out after: pass 0.219 [0.110, 0.388], valid 0.938. Intervals overlap.
  Steps took 5-28 s each (8 rollouts of ~130 sampled tokens on a 3.4k-token prompt, plus the update);
  the invalid actions left are a corrupted submit marker or no parsable call at all. Mismatch (engine
  vs trainer logprob of the sampled tokens, float32 both): mean <= 3e-7, max <= 3e-5 on every step.
  Why the format goes at 1e-3 (a reading, not measured here): once C is learned, a group's only
  reward spread is valid against invalid, and an invalid rollout's sampled tokens after its break are
  high-entropy noise whose gradients Adam scales to full-size steps on every weight they touch.
"""

from __future__ import annotations

import argparse
import copy
import math
import random
import sys
import time

from mock_engine.build_policy import read_tasks
from mock_engine.policy_eval import Rollout, rollout, sample_tasks, summarize


def wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    den = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return (max(0.0, mid - half), min(1.0, mid + half))


def advantages(rewards: list[float]) -> list[float]:
    import statistics

    mean = sum(rewards) / len(rewards)
    std = statistics.stdev(rewards) if len(rewards) > 1 else 0.0
    return [(r - mean) / (std + 1e-4) for r in rewards]


def group_logps(model, group: list[Rollout], dtype: str):
    """Trainer-side logprobs (with gradient) of each rollout's sampled tokens, one tensor per rollout.

    The shared first prompt is encoded once without gradient; each rollout's rest attends to it."""
    import torch

    cut = group[0].spans[0][0] - 1
    out = []
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bf16")
    with autocast:
        with torch.no_grad():
            prefix = model(input_ids=torch.tensor([group[0].ids[:cut]]), use_cache=True).past_key_values
        for r in group:
            cache = copy.deepcopy(prefix)
            rest = torch.tensor([r.ids[cut:]])
            logits = model(input_ids=rest, past_key_values=cache, use_cache=True).logits[0].float()
            logp = torch.log_softmax(logits, -1)
            pos = torch.tensor([p - cut for s, e in r.spans for p in range(s, e)])
            out.append(logp[pos - 1, rest[0, pos]])
    return out


def held_out(lm, tasks: list[str], n: int, seed: int) -> dict:
    rollouts = [rollout(lm, t, u, s) for t, u, s in sample_tasks(tasks, n, seed)]
    s = summarize(rollouts)
    s["invalid"] = [r.commands[0] for r in rollouts if not r.valid][:3]
    k = int(round(s["pass"] * n))
    s["wilson"] = wilson(k, n)
    return s


def fmt(s: dict) -> str:
    lo, hi = s["wilson"]
    letters = " ".join(f"{k}={v:.2f}" for k, v in s["letter_rate"].items())
    return f"pass@1 {s['pass']:.3f} [{lo:.3f}, {hi:.3f}] (n={s['n']}), valid {s['valid']:.3f}, {letters}"


def run(args, lr: float, base: dict | None) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    from mock_engine.lm import TinyLM

    torch.manual_seed(args.seed)
    engine = TinyLM(args.model_dir, 32768, 256)
    trainer = AutoModelForCausalLM.from_pretrained(args.model_dir, dtype=torch.float32)
    if args.dtype == "bf16-pure":
        trainer = trainer.to(torch.bfloat16)
    trainer.train()
    opt = torch.optim.AdamW(trainer.parameters(), lr=lr)
    train_tasks, eval_tasks = read_tasks(args.train), read_tasks(args.heldout)
    if base is None:  # every run starts from the same weights: one measurement serves them all
        base = held_out(engine, eval_tasks, args.eval_n, seed=1000)
        print(f"[lr={lr:g} {args.dtype}] base  {fmt(base)}", flush=True)
    rng = random.Random(args.seed)
    curve = []
    for step in range(1, args.steps + 1):
        t0 = time.monotonic()
        batch: list[list[Rollout]] = []
        for _ in range(args.groups):
            task, uname, _ = sample_tasks([rng.choice(train_tasks)], 1, seed=rng.randrange(1 << 30))[0]
            batch.append([rollout(engine, task, uname, seed=rng.randrange(1 << 30)) for _ in range(args.group_size)])
        flat = [r for group in batch for r in group]
        opt.zero_grad()
        n_tok = sum(len(r.logprobs) for r in flat)
        diffs = []
        for group in batch:
            adv = advantages([r.reward for r in group])
            logps = group_logps(trainer, group, args.dtype)
            loss = sum(-(a * lp.sum()) for a, lp in zip(adv, logps)) / n_tok
            loss.backward()
            for r, lp in zip(group, logps):
                diffs += [abs(x - y) for x, y in zip(lp.detach().tolist(), r.logprobs)]
        opt.step()
        if args.push:
            with torch.no_grad(), engine.lock:
                for p, q in zip(engine.model.parameters(), trainer.parameters(), strict=True):
                    p.copy_(q.float())
        s = summarize(flat)
        row = {
            "step": step,
            "pass": s["pass"],
            "valid": s["valid"],
            "mismatch_mean": sum(diffs) / len(diffs),
            "mismatch_max": max(diffs),
            "s": time.monotonic() - t0,
        }
        curve.append(row)
        print(
            f"[lr={lr:g} {args.dtype}] step {step:2d}  pass {row['pass']:.3f}  valid {row['valid']:.3f}  "
            f"mismatch mean {row['mismatch_mean']:.2e} max {row['mismatch_max']:.2e}  {row['s']:.0f} s",
            flush=True,
        )
        if args.eval_every and step % args.eval_every == 0 and step < args.steps:
            mid = held_out(engine, eval_tasks, args.eval_n, seed=3000 + step)
            row["heldout"] = mid
            print(f"[lr={lr:g} {args.dtype}] step {step:2d}  held-out {fmt(mid)}", flush=True)
    after = held_out(engine, eval_tasks, args.eval_n, seed=2000)
    print(f"[lr={lr:g} {args.dtype}] after {fmt(after)}", flush=True)
    print(f"[lr={lr:g} {args.dtype}] after: first invalid commands {after['invalid']}", flush=True)
    separated = after["wilson"][0] > base["wilson"][1]
    print(f"[lr={lr:g} {args.dtype}] Wilson intervals separate: {separated}", flush=True)
    return {"lr": lr, "base": base, "after": after, "curve": curve, "separated": separated}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-dir", default="/app/models/pick-policy")
    parser.add_argument("--train", default="datasets/pick-answer/train")
    parser.add_argument("--heldout", default="datasets/pick-answer/heldout")
    parser.add_argument("--lr", type=float, nargs="+", default=[3e-4, 0.0])
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--groups", type=int, default=1, help="groups (tasks) per step")
    parser.add_argument("--group-size", type=int, default=8, help="rollouts per group (NUM_GENERATIONS)")
    parser.add_argument("--eval-n", type=int, default=32, help="held-out rollouts before and after")
    parser.add_argument("--eval-every", type=int, default=0, help="also measure held-out every N steps")
    parser.add_argument("--dtype", choices=("fp32", "bf16", "bf16-pure"), default="fp32")
    parser.add_argument("--no-push", dest="push", action="store_false", help="control: never push weights")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    base = None
    for lr in args.lr:
        base = run(args, lr, base)["base"]
    return 0


if __name__ == "__main__":
    sys.exit(main())
