"""Rollout samples shaped like mini-swe-agent trajectories, as TRL's rollout queue carries them.

Sizes come from `stack.sizing.limits.TurnSizes` (mini-swe-agent 2.4.6's own templates, measured in characters; see
there). Token ids are random: the loss step's cost depends on lengths, sharing and masks, not on which ids.

Two forms of the same rollout:
- chained: the capture proxy's exact-prefix chain, ONE sample: prompt, then per step the sampled completion
  (trained) and the tool output (context). This is what the stack trains on.
- forked: what a re-rendered prompt produces: one sample per step, each repeating the whole prefix with the
  earlier completions re-rendered (context, not trained) and only its own completion trained. The re-rendering
  is modelled as differing from the sampled ids at a completion's first token, the earliest a non-canonical
  tokenization can diverge, so TRL's prefix trie shares as little as a real fork allows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stack.sizing.limits import DEFAULT_TURNS, TurnSizes


@dataclass
class Trajectory:
    prompt: np.ndarray  # template + task ids
    completions: list[np.ndarray]
    observations: list[np.ndarray]  # observations[i] follows completions[i]; the last one is never seen

    @property
    def steps(self) -> int:
        return len(self.completions)


def _ids(rng: np.random.Generator, n: int, vocab: int) -> np.ndarray:
    # Ids 0-9 stay free for the benchmark tokenizer's special tokens.
    return rng.integers(10, vocab, size=n, dtype=np.int64)


def template_ids(vocab: int, turns: TurnSizes = DEFAULT_TURNS) -> np.ndarray:
    # The same system + instance template for every task, so TRL's trie shares it across groups in a row.
    return _ids(np.random.default_rng(12345), turns.template_tokens + turns.message_overhead_tokens, vocab)


def trajectory(
    seed: int, steps: int, vocab: int, turns: TurnSizes = DEFAULT_TURNS, ids_seed: int | None = None
) -> Trajectory:
    """Turn sizes drawn from `seed`, token ids from `ids_seed` (default: `seed`): the same shape with other ids is
    another rollout of equal cost that TRL's trie cannot fold into the first."""
    sizes = np.random.default_rng(seed)
    rng = np.random.default_rng(seed if ids_seed is None else (seed, ids_seed))
    prompt = np.concatenate([template_ids(vocab, turns), _ids(rng, turns.task_tokens, vocab)])
    overhead = 2 * turns.message_overhead_tokens
    completions, observations = [], []
    for _ in range(steps):
        c = int(sizes.integers(turns.completion_tokens[0], turns.completion_tokens[1] + 1))
        o = int(sizes.integers(turns.observation_tokens[0], turns.observation_tokens[1] + 1)) + overhead
        completions.append(_ids(rng, c, vocab))
        observations.append(_ids(rng, o, vocab))
    return Trajectory(prompt, completions, observations)


def trajectory_of_length(
    seed: int, tokens: int, vocab: int, turns: TurnSizes = DEFAULT_TURNS, ids_seed: int | None = None
) -> Trajectory:
    """As many steps as fit in `tokens`; the last completion is cut (or stretched) so the chained sample is exactly
    `tokens` long."""
    full = trajectory(seed, tokens // 300 + 2, vocab, turns, ids_seed)
    if tokens <= len(full.prompt):
        raise ValueError(
            f"a {tokens}-token sample cannot hold the {len(full.prompt)}-token prompt and a completion"
        )  # a step adds >= 324 tokens
    length, steps = len(full.prompt), 0
    while True:
        c, o = len(full.completions[steps]), len(full.observations[steps])
        if length + c + o + 1 > tokens:  # no room left for the next step: this completion ends the sample
            last = np.resize(full.completions[steps], tokens - length)
            return Trajectory(full.prompt, full.completions[:steps] + [last], full.observations[: steps + 1])
        length += c + o
        steps += 1


def chained_sample(t: Trajectory) -> tuple[np.ndarray, np.ndarray]:
    parts, mask = [t.prompt], [np.zeros(len(t.prompt), np.int64)]
    for i, completion in enumerate(t.completions):
        parts.append(completion)
        mask.append(np.ones(len(completion), np.int64))
        if i + 1 < t.steps:
            parts.append(t.observations[i])
            mask.append(np.zeros(len(t.observations[i]), np.int64))
    return np.concatenate(parts), np.concatenate(mask)


def rerendered(completion: np.ndarray, vocab: int) -> np.ndarray:
    out = completion.copy()
    out[0] = 10 + (int(out[0]) - 10 + 1) % (vocab - 10)
    return out


def forked_samples(t: Trajectory, vocab: int) -> list[tuple[np.ndarray, np.ndarray]]:
    samples = []
    for k in range(t.steps):
        parts = [t.prompt]
        for i in range(k):
            parts += [rerendered(t.completions[i], vocab), t.observations[i]]
        context = sum(len(p) for p in parts)
        ids = np.concatenate(parts + [t.completions[k]])
        mask = np.zeros(len(ids), np.int64)
        mask[context:] = 1
        samples.append((ids, mask))
    return samples


def rollout_sample(ids: np.ndarray, mask: np.ndarray, group_id: int, seed: int, vocab: int):
    """A TRL `RolloutSample` (what the rollout worker puts on the queue), with generator logprobs and advantage.

    The generator logprobs sit near a random-weight model's own (-ln vocab), so the clipped ratio stays near 1 and
    the loss has gradient, as in training; the step's cost does not depend on it either way."""
    from trl.experimental.async_grpo.async_rollout_worker import RolloutSample

    rng = np.random.default_rng(seed)
    old = -np.log(vocab) + rng.normal(0.0, 0.05, size=len(ids))
    old_log_probs = np.where(mask > 0, old, 0.0).astype(np.float32)
    return RolloutSample(
        prompt=[],
        completion=[],
        input_ids=ids,
        completion_mask=mask,
        old_log_probs=old_log_probs,
        advantage=1.0 if seed % 2 == 0 else -1.0,
        model_version=0,
        group_id=group_id,
        metrics={},
    )
