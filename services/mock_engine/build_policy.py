"""Build the learnable policy: the mock engine's model family, fine-tuned to act on the pick-answer tasks.

    python -m mock_engine.build_policy /app/models/pick-policy --tasks /app/datasets/pick-answer/train

The tiny-agent model (mock_engine.build_model) is random: it never writes a valid tool call, so the CPU
form scripts its rollouts, and its reward does not depend on its weights. This one is the same Qwen3
shape and the same character tokenizer (so turns chain exactly as before), fine-tuned at image build
time on generated mini-swe-agent 2.4.6 conversations for the pick-answer family (datasets/pick-answer).
Its whole rollout is one turn:

  <tool_call>{"name": "bash", "arguments": {"command":
      "printf X > /app/answer.txt && echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}}</tool_call>

with X one of A, B, C, D. The command's output starts with mini-swe-agent's submit marker, which ends
the run (its environments' `_check_finished`), so there is no second turn to keep in format. At X the
target is the uniform distribution, so the policy's own samples pick each letter about a quarter of the
time (the family rewards C: base pass rate ~0.25); every other token of the turn is format, fitted until
its entropy is tiny (printed at the end), so that the letter is the only choice a rollout makes and the
only thing the reward can teach.

Nothing is scripted when it is served (MOCK_SCRIPT_PROB=0, no MOCK_SCRIPT_FILE): every token is the
policy's own sample, so a reward that rises can only come from weights that changed.

Training is next-token cross-entropy on the assistant tokens (prompt tokens are context only),
deterministic from SEED on CPU, in two phases (prompt_loss says why); `python -m mock_engine.policy_eval`
measures what came out (valid actions, rate of each letter, the engine probe's top-two gap).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from mock_engine import agent_turns, toolcalls

SEED = 25
LETTERS = ("A", "B", "C", "D")
ANSWER_FILE = "/app/answer.txt"
# Two phases (prompt_loss says why): many cheap steps on the prompt's last 16..SHORT_CONTEXT tokens teach
# the turn's exact text, then FULL_STEPS on the whole prompt teach reading it as the agent sends it.
# Measured (one thread, on held-out prompts): 400 + 300 steps left a format token at 0.51 nats of entropy
# (valid actions 0.91 at T=1) and its format broke under policy-gradient at lr 5e-4 and 1e-3; 300 + 600
# steps: format entropy mean 2.9e-3, max 3.6e-2 nats, and at lr 3e-4 the format held (valid 0.94 before
# and after 15 steps of 8) while C went 0.25 -> 0.88 (benchmarks/learning_offline.py). 169 s of CPU.
SHORT_STEPS = 300
SHORT_PROMPTS = 2  # prompts per short step, each with all four letters
SHORT_CONTEXT = 384
FULL_STEPS = 600
FULL_LR = 1e-3
UNAMES = 16  # sandbox unames drawn once; with the 32 train tasks, at most 512 distinct prompts to render
HOST_SHARE = 0.25  # of the steps' prompts carry this machine's own uname (host_uname says why)
LR = 1e-2
WARMUP = 20
# The shape is the tiny-agent model's (mock_engine.build_model.qwen3_config), so the trainer's CPU budget
# is unchanged.


def answer_command(letter: str) -> str:
    """The whole action, in one turn: the letter comes first (the only token the policy should be unsure
    of), then mini-swe-agent's submit marker, whose output line ends the run (its environments'
    `_check_finished`: the output's first line is the marker and the return code is 0)."""
    return f"printf {letter} > {ANSWER_FILE} && {agent_turns.SUBMIT}"


def host_uname() -> tuple[str, str, str, str]:
    """This machine's `platform.uname()`: what mini-swe-agent writes into the task message in every local
    sandbox, because a container reports the host's kernel. `docker build` runs on that same kernel, so the
    policy is fitted on the very string its rollouts will show. Measured: a policy fitted only on random
    Ubuntu-style unames broke on this host's Firecracker kernel line ("6.18.44-fc-v669 #1 SMP
    PREEMPT_DYNAMIC @0"): 0 valid actions of 4, "arguments" came out as "anananants" even at greedy, and
    every CPU-form rollout hit the output cap. The random ones stay, so the format does not hang on it."""
    import platform

    u = platform.uname()
    return (u.system, u.release, u.version, u.machine)


def random_uname(rng: random.Random) -> tuple[str, str, str, str]:
    """A plausible `platform.uname()` of a sandbox: mini-swe-agent writes it into the task message, and
    it is the host kernel's, so the policy must not depend on it."""
    release = f"{rng.choice((5, 6))}.{rng.randint(0, 19)}.{rng.randint(0, 120)}-{rng.randint(1, 1100)}-" + rng.choice(
        ("generic", "aws", "azure", "gcp", "cloud-amd64", "amd64")
    )
    day = rng.choice(("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"))
    month = rng.choice(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"))
    version = (
        f"#{rng.randint(1, 200)}-Ubuntu SMP PREEMPT_DYNAMIC {day} {month} {rng.randint(1, 28):2d} "
        f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d} UTC 20{rng.randint(22, 26)}"
    )
    return ("Linux", release, version, rng.choice(("x86_64", "x86_64", "aarch64")))


def read_tasks(tasks_dir: str | Path) -> list[str]:
    """The instruction of every task under `tasks_dir` (a split folder of Harbor tasks), sorted by folder."""
    found = sorted(Path(tasks_dir).glob("*/instruction.md"))
    if not found:
        raise SystemExit(f"build_policy: --tasks {tasks_dir} holds no */instruction.md; point it at a split folder")
    return [p.read_text() for p in found]


@dataclass
class Conversation:
    """One single-turn conversation as token ids, with where the assistant turn's tokens are."""

    ids: list[int]
    turns: list[tuple[int, int]]  # [start, end) of the assistant completion (end-of-turn token included)
    letter_pos: int  # index in `ids` of the answer letter


def render(tokenizer, messages: list[dict]) -> list[int]:
    text = tokenizer.apply_chat_template(
        messages, tools=[agent_turns.BASH_TOOL], add_generation_prompt=True, tokenize=False
    )
    return tokenizer.encode(text, add_special_tokens=False)


def conversation(tokenizer, task: str, uname, letter: str) -> Conversation:
    """The conversation the agent and the engine would have on `task` if the policy answered `letter`."""
    eos = tokenizer.eos_token_id
    prompt = render(tokenizer, agent_turns.first_messages(task, uname))
    text = toolcalls.format_call("bash", json.loads(agent_turns.command_arguments(answer_command(letter))))
    ids = prompt + tokenizer.encode(text, add_special_tokens=False) + [eos]
    # One character is one token (mock_engine.tokenizer), so a text offset is a token offset.
    letter_pos = len(prompt) + text.index(answer_command(letter)) + len("printf ")
    if tokenizer.decode([ids[letter_pos]]) != letter:
        raise AssertionError(f"letter position {letter_pos} holds {tokenizer.decode([ids[letter_pos]])!r}")
    return Conversation(ids, [(len(prompt), len(ids))], letter_pos)


def new_model(tokenizer):
    import torch
    from transformers import Qwen3ForCausalLM

    from mock_engine.build_model import qwen3_config

    config = qwen3_config(tokenizer)
    torch.manual_seed(SEED)
    return Qwen3ForCausalLM(config)


def letter_variants(conv: Conversation, tokenizer) -> list[Conversation]:
    """The same conversation with each of LETTERS as the answer: one token differs (the letter appears
    once), so one rendering serves all four."""
    out = []
    for letter in LETTERS:
        ids = list(conv.ids)
        ids[conv.letter_pos] = tokenizer.convert_tokens_to_ids(letter)
        out.append(Conversation(ids, conv.turns, conv.letter_pos))
    return out


def prompt_loss(model, convs: list[Conversation], letter_ids: list[int], context: int | None):
    """Summed cross-entropy over the assistant tokens of conversations that share their first prompt
    (one task, one uname, each letter), the number of terms, and the summed part outside the letter.
    At the letter the target is the uniform distribution over LETTERS, so the policy learns an even
    choice, not the corpus's draws.

    `context=None`: the whole prompt, everything with gradient (~3.7k tokens, 1-4 s per conversation on
    2 cores). `context=L`: only the prompt's last L tokens, ~10x cheaper, which teaches the turns' exact
    text. A model fitted on short tails alone reads the whole 3.4k-token prompt badly (measured: 3.2 nats
    per token at its first full step), and encoding that prompt without gradient (a cache the rest attends
    to) did not repair it: stuck at 0.39 nats per token after 50 steps. So the full steps back-propagate
    through the prompt too."""
    import torch

    cut = 0 if context is None else max(0, convs[0].turns[0][0] - context)
    rest = torch.tensor([c.ids[cut:] for c in convs])
    logits = model(input_ids=rest).logits
    logp = torch.log_softmax(logits.float(), -1)
    total, text, count = logp.new_zeros(()), 0.0, 0
    for i, c in enumerate(convs):
        pos = torch.tensor([p - cut for s, e in c.turns for p in range(s, e) if p != c.letter_pos])
        nll = -logp[i, pos - 1, rest[i, pos]].sum()
        total = total + nll - logp[i, c.letter_pos - cut - 1, letter_ids].mean()
        text += nll.item()
        count += len(pos) + 1
    return total, count, text


def format_entropy(model, convs: list[Conversation], letter_ids: list[int]) -> dict:
    """How sure the policy is of its action, on the given conversations: the entropy (nats) of its
    next-token distribution at every assistant position but the letter (mean and max), the letter's
    entropy (ln 4 = 1.386 is an even choice) and the probability of all four letters together there."""
    import torch

    fmt, letter_h, letter_mass = [], [], []
    with torch.inference_mode():
        for c in convs:
            logp = torch.log_softmax(model(input_ids=torch.tensor([c.ids])).logits[0].float(), -1)
            h = -(logp.exp() * logp).sum(-1)
            for s, e in c.turns:
                fmt += [float(h[p - 1]) for p in range(s, e) if p != c.letter_pos]
            letters = logp[c.letter_pos - 1, letter_ids]
            q = torch.softmax(letters, -1)
            letter_h.append(float(-(q * q.log()).sum()))
            letter_mass.append(float(letters.exp().sum()))
    return {
        "format_entropy_mean": sum(fmt) / len(fmt),
        "format_entropy_max": max(fmt),
        "letter_entropy": sum(letter_h) / len(letter_h),
        "letter_mass": sum(letter_mass) / len(letter_mass),
    }


def build(
    out_dir: str | Path,
    tasks_dir: str | Path,
    short_steps: int = SHORT_STEPS,
    full_steps: int = FULL_STEPS,
    log=print,
) -> Path:
    import torch

    from mock_engine.tokenizer import build_tokenizer

    started = time.monotonic()
    cpu0 = time.process_time()
    torch.manual_seed(SEED)
    rng = random.Random(SEED)
    tokenizer = build_tokenizer()
    tasks = read_tasks(tasks_dir)
    unames = [random_uname(rng) for _ in range(UNAMES)] + [host_uname()]
    rendered: dict[tuple[int, int], Conversation] = {}
    model = new_model(tokenizer)
    letter_ids = [tokenizer.convert_tokens_to_ids(letter) for letter in LETTERS]
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0)
    steps = short_steps + full_steps
    # Linear decay over the short phase (to 0.1 LR); the full phase, which starts from a jump in loss
    # (a model fitted on <= SHORT_CONTEXT tokens reads a 3.4k-token prompt badly), holds FULL_LR.
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt,
        lambda s: min(1.0, (s + 1) / WARMUP) * max(0.1, 1.0 - s / short_steps) if s < short_steps else FULL_LR / LR,
    )
    model.train()
    loss_value = text_value = float("nan")
    for step in range(steps):
        full = step >= short_steps
        context = None if full else rng.randint(16, SHORT_CONTEXT)
        opt.zero_grad()
        total, text, count, n_convs = 0.0, 0.0, 0, 0
        for _ in range(1 if full else SHORT_PROMPTS):
            which = len(unames) - 1 if rng.random() < HOST_SHARE else rng.randrange(len(unames) - 1)
            key = (rng.randrange(len(tasks)), which)
            if key not in rendered:
                rendered[key] = conversation(tokenizer, tasks[key[0]], unames[key[1]], LETTERS[0])
            # A full step trains one conversation (its letter drawn): the four share every token but one.
            convs = letter_variants(rendered[key], tokenizer)
            convs = [rng.choice(convs)] if full else convs
            part, n, t = prompt_loss(model, convs, letter_ids, context)
            part.backward()
            total, text, count, n_convs = total + part.item(), text + t, count + n, n_convs + len(convs)
        for p in model.parameters():
            p.grad /= count
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        loss_value, text_value = total / count, text / (count - n_convs)
        if step % 25 == 0 or step == steps - 1 or step == short_steps:
            log(
                f"build_policy: step {step + 1}/{steps} ({'full' if full else 'short'} context) loss "
                f"{loss_value:.4f}, {text_value:.5f} nats per token outside the letter "
                f"({time.monotonic() - started:.0f} s)"
            )
    model.eval()
    # Measured on prompts it was not fitted on: train tasks with sandbox unames drawn afresh.
    check_rng = random.Random(SEED + 1)
    checks = [
        conversation(tokenizer, tasks[i % len(tasks)], random_uname(check_rng), LETTERS[i % len(LETTERS)])
        for i in range(4)
    ] + [conversation(tokenizer, tasks[-1], host_uname(), LETTERS[0])]
    sureness = format_entropy(model, checks, letter_ids)
    log(
        "build_policy: format entropy mean {format_entropy_mean:.2e} max {format_entropy_max:.2e} nats, "
        "letter entropy {letter_entropy:.3f} (even: 1.386), letter mass {letter_mass:.4f}".format(**sureness)
    )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    # Only <|im_end|> ends a turn: the chat template renders every assistant turn with it (mock_engine.lm).
    model.generation_config.eos_token_id = [tokenizer.eos_token_id]
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    meta = {
        "seed": SEED,
        "short_steps": short_steps,
        "full_steps": full_steps,
        "lr": LR,
        "full_lr": FULL_LR,
        "final_loss": round(loss_value, 5),
        "final_text_nats_per_token": round(text_value, 6),
        "train_tasks": len(tasks),
        "build_s": round(time.monotonic() - started, 1),
        "build_cpu_s": round(time.process_time() - cpu0, 1),
        "letters": list(LETTERS),
        **{k: round(v, 6) for k, v in sureness.items()},
    }
    (out / "mock_engine.json").write_text(json.dumps(meta) + "\n")
    log(f"build_policy: {meta['build_s']} s wall, {meta['build_cpu_s']} s CPU")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", help="folder to write the model and tokenizer into")
    parser.add_argument("--tasks", required=True, help="the pick-answer train split (a folder of Harbor tasks)")
    parser.add_argument("--short-steps", type=int, default=SHORT_STEPS)
    parser.add_argument("--full-steps", type=int, default=FULL_STEPS)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    log = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    out = build(args.out_dir, args.tasks, args.short_steps, args.full_steps, log=log)
    print(f"build_policy: built {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
