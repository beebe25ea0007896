"""Build the learnable policy: the mock engine's model family, fine-tuned to act on the pick-answer tasks.

    python -m mock_engine.build_policy /app/models/pick-policy --tasks /app/datasets/pick-answer/train

The tiny-agent model (mock_engine.build_model) is random: it never writes a valid tool call, so the CPU
form scripts its rollouts, and its reward does not depend on its weights. This one is the same Qwen3
shape and the same character tokenizer (so turns chain exactly as before), fine-tuned at image build
time on generated mini-swe-agent 2.4.6 conversations for the pick-answer family (datasets/pick-answer):

  turn 1  <tool_call>{"name": "bash", "arguments": {"command": "printf X > /app/answer.txt"}}</tool_call>
          with X one of A, B, C, D: the target at X is the uniform distribution, so the policy's own
          samples pick each letter about a quarter of the time (the family rewards C: base pass rate ~0.25);
  turn 2  the same call with mini-swe-agent's submit command, after the tool's observation.

Nothing is scripted when it is served (MOCK_SCRIPT_PROB=0, no MOCK_SCRIPT_FILE): every token is the
policy's own sample, so a reward that rises can only come from weights that changed. The answer command
starts with `printf`, the submit one with `echo`: the turn is decided at the command's first character,
and no letter (C!) is a prefix of the submit command.

Training is plain next-token cross-entropy on the assistant tokens of whole two-turn conversations
(prompt tokens are context only), deterministic from SEED on CPU; `mock_engine.policy_eval --check`
measures what came out (valid actions, base rate per letter, the engine probe's top-two gap).
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
# Measured on 2 cores (policy_eval --check): this many steps of this batch make >= 98% of the policy's
# own two-turn samples valid at temperature 1.0; fewer left the long deterministic strings leaky.
STEPS = 240
PROMPTS = 1  # prompts per step, each with all four letters
LR = 1e-2
WARMUP = 20
# Same shape as the tiny-agent model (mock_engine.build_model), so the trainer's CPU budget is unchanged.
HIDDEN = 64
LAYERS = 2
HEADS = 4
KV_HEADS = 2
INTERMEDIATE = 192
MAX_POSITIONS = 32768


def answer_command(letter: str) -> str:
    return f"printf {letter} > {ANSWER_FILE}"


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
    """One two-turn conversation as token ids, with where each assistant turn's tokens are."""

    ids: list[int]
    turns: list[tuple[int, int]]  # [start, end) of each assistant completion (end-of-turn token included)
    letter_pos: int  # index in `ids` of the answer letter


def render(tokenizer, messages: list[dict]) -> list[int]:
    text = tokenizer.apply_chat_template(
        messages, tools=[agent_turns.BASH_TOOL], add_generation_prompt=True, tokenize=False
    )
    return tokenizer.encode(text, add_special_tokens=False)


def conversation(tokenizer, task: str, uname, letter: str) -> Conversation:
    """The conversation the agent and the engine would have on `task` if the policy answered `letter`."""
    eos = tokenizer.eos_token_id
    messages = agent_turns.first_messages(task, uname)
    prompt1 = render(tokenizer, messages)
    args1 = agent_turns.command_arguments(answer_command(letter))
    done1 = tokenizer.encode(toolcalls.format_call("bash", json.loads(args1)), add_special_tokens=False) + [eos]
    messages += [agent_turns.assistant_call(args1, "call_1"), agent_turns.observation("", 0, "call_1")]
    prompt2 = render(tokenizer, messages)
    if prompt2[: len(prompt1) + len(done1)] != prompt1 + done1:
        raise AssertionError("turn 1 does not re-render as sampled: the corpus would teach a forking turn")
    args2 = agent_turns.command_arguments(agent_turns.SUBMIT)
    done2 = tokenizer.encode(toolcalls.format_call("bash", json.loads(args2)), add_special_tokens=False) + [eos]
    ids = prompt2 + done2
    # One character is one token (mock_engine.tokenizer), so a text offset is a token offset.
    text1 = toolcalls.format_call("bash", json.loads(args1))
    letter_pos = len(prompt1) + text1.index(answer_command(letter)) + len("printf ")
    if tokenizer.decode([ids[letter_pos]]) != letter:
        raise AssertionError(f"letter position {letter_pos} holds {tokenizer.decode([ids[letter_pos]])!r}")
    return Conversation(ids, [(len(prompt1), len(prompt1) + len(done1)), (len(prompt2), len(ids))], letter_pos)


def new_model(tokenizer):
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        head_dim=HIDDEN // HEADS,
        max_position_embeddings=MAX_POSITIONS,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        dtype="float32",
    )
    torch.manual_seed(SEED)
    return Qwen3ForCausalLM(config)


def prompt_loss(model, convs: list[Conversation], letter_ids: list[int]):
    """Summed cross-entropy over the assistant tokens of conversations that share their first prompt
    (one task, one uname, different letters), and the number of terms. At the letter the target is
    the uniform distribution over LETTERS, so the policy learns an even choice, not the corpus's draws.

    The shared prompt (~3.4k tokens of mini-swe-agent's instructions) is encoded once, without gradient,
    and each conversation's rest (~270 tokens) attends to that cache with gradient: the policy learns how
    its turns read the prompt, not how the prompt is encoded. That is what makes the build minutes on 2
    cores instead of an hour (a full 3.7k-token backward per conversation, measured 1-4 s)."""
    import torch

    cut = convs[0].turns[0][0] - 1  # the prompt's last token goes with the rest: it predicts turn 1's first
    with torch.no_grad():
        cache = model(input_ids=torch.tensor([convs[0].ids[:cut]]), use_cache=True).past_key_values
    cache.batch_repeat_interleave(len(convs))
    rest = torch.tensor([c.ids[cut:] for c in convs])
    logp = torch.log_softmax(model(input_ids=rest, past_key_values=cache, use_cache=True).logits.float(), -1)
    total, count = logp.new_zeros(()), 0
    for i, c in enumerate(convs):
        pos = torch.tensor([p - cut for s, e in c.turns for p in range(s, e) if p != c.letter_pos])
        total = total - logp[i, pos - 1, rest[i, pos]].sum() - logp[i, c.letter_pos - cut - 1, letter_ids].mean()
        count += len(pos) + 1
    return total, count


def build(out_dir: str | Path, tasks_dir: str | Path, steps: int = STEPS, log=print) -> Path:
    import torch

    from mock_engine.tokenizer import build_tokenizer

    started = time.monotonic()
    torch.manual_seed(SEED)
    rng = random.Random(SEED)
    tokenizer = build_tokenizer()
    tasks = read_tasks(tasks_dir)
    model = new_model(tokenizer)
    letter_ids = [tokenizer.convert_tokens_to_ids(letter) for letter in LETTERS]
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / WARMUP) * max(0.05, 1.0 - s / max(steps, 1))
    )
    model.train()
    loss_value = float("nan")
    for step in range(steps):
        opt.zero_grad()
        total, count = 0.0, 0
        for _ in range(PROMPTS):
            task, uname = rng.choice(tasks), random_uname(rng)
            part, n = prompt_loss(model, [conversation(tokenizer, task, uname, x) for x in LETTERS], letter_ids)
            part.backward()
            total, count = total + part.item(), count + n
        for p in model.parameters():
            p.grad /= count
        loss = total / count
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        loss_value = float(loss)
        if step % 20 == 0 or step == steps - 1:
            log(f"build_policy: step {step + 1}/{steps} loss {loss_value:.4f} ({time.monotonic() - started:.0f} s)")
    model.eval()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    # Only <|im_end|> ends a turn: the chat template renders every assistant turn with it (mock_engine.lm).
    model.generation_config.eos_token_id = [tokenizer.eos_token_id]
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    meta = {
        "seed": SEED,
        "steps": steps,
        "prompts_per_step": PROMPTS,
        "lr": LR,
        "final_loss": round(loss_value, 5),
        "train_tasks": len(tasks),
        "build_s": round(time.monotonic() - started, 1),
        "letters": list(LETTERS),
    }
    (out / "mock_engine.json").write_text(json.dumps(meta) + "\n")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", help="folder to write the model and tokenizer into")
    parser.add_argument("--tasks", required=True, help="the pick-answer train split (a folder of Harbor tasks)")
    parser.add_argument("--steps", type=int, default=STEPS, help=f"optimizer steps (default {STEPS})")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(2)
    out = build(args.out_dir, args.tasks, args.steps, log=lambda s: print(s, file=sys.stderr, flush=True))
    print(f"build_policy: built {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
