"""Sample the learnable policy the way the CPU form serves it, and say what it does.

    python -m mock_engine.policy_eval /app/models/pick-policy --tasks /app/datasets/pick-answer/heldout

Each rollout is the agent's one turn on one task, through the mock engine's own code: the chat
template renders mini-swe-agent's conversation, `TinyLM.sample` draws every token (temperature 1.0, no
truncation, nothing scripted), `toolcalls.parse` decides whether the agent would see a tool call.
Prints the fraction of valid actions (one bash call that writes a letter and submits, ended by the
end-of-turn token), the rate of each letter, the pass rate the family's verifier would give, and the
top-two gap the engine probe measures (services/stack/serving/probe.py needs >= 0.5 at T=1 that halves at T=2).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from collections import Counter
from dataclasses import dataclass, field

from mock_engine import agent_turns, toolcalls
from mock_engine.build_policy import LETTERS, random_uname, read_tasks

REWARDED = "C"  # datasets/pick-answer/generate.py: the letter the family's verifier rewards
_ANSWER = re.compile(r"printf ([A-Z]) > /app/answer\.txt && " + re.escape(agent_turns.SUBMIT))
PROBE_PROMPT = "Reply with exactly: hello"  # services/stack/serving/probe.py and OpenEnv's validate_llm


@dataclass
class Rollout:
    letter: str | None  # the letter the action wrote, None when the turn was no valid action
    valid: bool  # one bash call the agent accepts: write a letter, then submit
    commands: list[str | None] = field(default_factory=list)
    # For training on it: the token ids of the whole exchange, where the sampled turn sits in them,
    # and the engine's logprob of every sampled token.
    ids: list[int] = field(default_factory=list)
    spans: list[tuple[int, int]] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)

    @property
    def reward(self) -> float:
        return 1.0 if self.letter == REWARDED else 0.0


def _command(text_ids: list[int], lm) -> str | None:
    parsed = toolcalls.parse(lm.decode(text_ids), tools_offered=True)
    if len(parsed.tool_calls) != 1 or parsed.tool_calls[0]["function"]["name"] != "bash":
        return None
    args = json.loads(parsed.tool_calls[0]["function"]["arguments"])
    return args.get("command") if isinstance(args.get("command"), str) else None


def rollout(lm, task: str, uname, seed: int, temperature: float = 1.0, max_tokens: int = 256) -> Rollout:
    from mock_engine.lm import Sampling

    prompt = lm.render_chat(agent_turns.first_messages(task, uname), [agent_turns.BASH_TOOL], True, None)
    gen = lm.sample(prompt, Sampling(max_tokens=max_tokens, temperature=temperature, seed=seed * 2))
    out = Rollout(letter=None, valid=False)
    out.ids = prompt + gen.token_ids
    out.spans.append((len(prompt), len(out.ids)))
    out.logprobs += gen.logprobs
    command = _command(gen.token_ids[:-1], lm) if gen.finish_reason == "stop" else None
    out.commands.append(command)
    match = _ANSWER.fullmatch(command or "")
    if match:
        out.letter, out.valid = match.group(1), True
    return out


def summarize(rollouts: list[Rollout]) -> dict:
    n = len(rollouts)
    letters = Counter(r.letter for r in rollouts if r.letter)
    return {
        "n": n,
        "valid": sum(r.valid for r in rollouts) / n,
        "letter_rate": {x: letters.get(x, 0) / n for x in LETTERS},
        "other": (n - sum(letters.values())) / n,
        "pass": sum(r.reward for r in rollouts) / n,
    }


def probe_gaps(lm) -> tuple[float, float]:
    """The engine probe's top-two logprob gap at the first sampled position, at T=1 and T=2."""
    import torch

    ids = lm.render_chat([{"role": "user", "content": PROBE_PROMPT}], None, True, None)
    with torch.inference_mode():
        logits = lm.model(input_ids=torch.tensor([ids])).logits[0, -1]
    gaps = []
    for t in (1.0, 2.0):
        top = torch.topk(torch.log_softmax(logits / t, -1), 2).values
        gaps.append(float(top[0] - top[1]))
    return gaps[0], gaps[1]


def sample_tasks(tasks: list[str], n: int, seed: int, uname: tuple | None = None) -> list[tuple[str, tuple, int]]:
    """`n` (task, uname, seed) draws, cycling through the tasks in order so each gets its share; with `uname`
    every draw carries that one (the host's, as local sandboxes report it), else each a random one."""
    rng = random.Random(seed)
    return [(tasks[i % len(tasks)], uname or random_uname(rng), seed * 100_003 + i) for i in range(n)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model_dir")
    parser.add_argument("--tasks", required=True, help="a pick-answer split folder")
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    import torch

    from mock_engine.lm import TinyLM

    torch.set_num_threads(2)
    lm = TinyLM(args.model_dir, 32768, 256)
    tasks = read_tasks(args.tasks)
    rollouts = [rollout(lm, t, u, s, args.temperature) for t, u, s in sample_tasks(tasks, args.samples, args.seed)]
    s = summarize(rollouts)
    g1, g2 = probe_gaps(lm)
    rates = " ".join(f"{k}={v:.3f}" for k, v in s["letter_rate"].items())
    print(
        f"policy_eval: {s['n']} rollouts at T={args.temperature:g} on {args.tasks}: valid {s['valid']:.3f}, "
        f"letters {rates} other={s['other']:.3f}, pass rate ({REWARDED}) {s['pass']:.3f}"
    )
    print(f"policy_eval: probe top-two gap {g1:.3f} at T=1, {g2:.3f} at T=2 (ratio {g2 / g1:.3f}; need >= 0.5, ~0.5)")
    bad = [r.commands for r in rollouts if not r.valid][:3]
    if bad:
        print(f"policy_eval: first invalid turns: {bad}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
