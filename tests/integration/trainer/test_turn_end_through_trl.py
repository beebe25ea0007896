"""Turn ends that do not fork, through the mock engine's chat route and TRL 1.16.0's own reconciler
(`_chain_to_sequences` at fork threshold 0, as OpenEnv's lossless capture sets it).

The tiny model's generation config stops on `<|im_end|>` and `<|endoftext|>`, as Qwen3's does; its chat
template closes an assistant turn with `<|im_end|>`. The mock's `turn_end_other` fault is a policy that ends
its replies on `<|endoftext|>`. With TURN_END_TOKENS=auto (the default) the engine stops on the template's
turn end alone: the other token stays in the reply, the turn closes on `<|im_end|>`, and a 3-turn
conversation chains into one row. With TURN_END_TOKENS=model (the guard off: the stop set left at both
tokens) each turn ends on `<|endoftext|>`, the next prompt renders `<|im_end|>` in its place, and both
transitions fork. Replies carry no tool call and the tools are offered, as mini-swe-agent's calls carry
them (vLLM 0.31's hermes parser then keeps special tokens in the text: stack/serving/turn_end.py).

In process (FastAPI's TestClient), about 20 s on two cores. Runs in the trainer image (TRL, the mock engine
and its tiny model): tests/run-in-image trainer tests/integration/trainer/test_turn_end_through_trl.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from fastapi.testclient import TestClient
from trl.experimental.async_grpo.async_rollout_worker import TurnRecord, _chain_to_sequences

from mock_engine import faults
from mock_engine.agent_turns import BASH_TOOL
from mock_engine.app import Settings, create_app, stop_plan
from mock_engine.lm import TinyLM

sys.path.insert(0, str(Path(__file__).parent))
from cpu_engine import tiny_model  # noqa: E402

SERVED = "tiny-agent"
IM_END, ENDOFTEXT = 2, 0  # mock_engine/tokenizer.py: <|endoftext|> is id 0, <|im_end|> id 2
# Seeds tried per turn until the policy's reply ends (a free sample of a random model ends when it draws
# the turn end): the first turn of each case ends within 30 seeds here; the cap only bounds a broken run.
SEEDS = 200
MAX_TOKENS = 32


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> str:
    torch.set_num_threads(1)  # as MOCK_TORCH_THREADS: the default pool thrashes two shared cores (30x slower)
    return str(tiny_model(tmp_path_factory.mktemp("model")))


def engine(model_dir: str, setting: str, active: list[str]):
    lm = TinyLM(model_dir, 32768, 256)
    plan = stop_plan(lm.tokenizer, model_dir, setting)
    lm.use_stops(plan)
    app = create_app(Settings(model_dir, SERVED, 32768, 256), lm, None, faults.parse(active))
    return TestClient(app), plan


def conversation(client: TestClient, turns: int = 3) -> tuple[list[TurnRecord], list[dict]]:
    """An agent's conversation: each reply goes back as the assistant's message, then a user nudge."""
    messages = [{"role": "user", "content": "List the files."}]
    records, choices = [], []
    for _ in range(turns):
        for seed in range(SEEDS):
            body = {
                "model": SERVED,
                "messages": messages,
                "tools": [BASH_TOOL],
                "temperature": 1.0,
                "seed": seed,
                "max_tokens": MAX_TOKENS,
                "logprobs": True,
                "return_token_ids": True,
            }
            payload = client.post("/v1/chat/completions", json=body).json()
            choice = payload["choices"][0]
            if choice["finish_reason"] == "stop":
                break
        else:
            raise AssertionError(f"no reply ended within {MAX_TOKENS} tokens in {SEEDS} seeds")
        records.append(
            TurnRecord(
                prompt_ids=payload["prompt_token_ids"],
                output_ids=choice["token_ids"],
                output_log_probs=[e["logprob"] for e in choice["logprobs"]["content"]],
            )
        )
        choices.append(choice)
        messages = [
            *messages,
            {"role": "assistant", "content": choice["message"]["content"]},
            {"role": "user", "content": "Go on."},
        ]
    return records, choices


def test_the_stop_sets_each_setting_gives(model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    auto, both = stop_plan(tok, model_dir, "auto"), stop_plan(tok, model_dir, "model")
    assert (auto.turn_end, auto.model_stops, auto.stops) == (IM_END, (IM_END, ENDOFTEXT), (IM_END,))
    assert both.stops == (IM_END, ENDOFTEXT) and both.extra == (ENDOFTEXT,)
    assert auto.line().startswith("turn end <|im_end|> (2): the engine stops on it alone (TURN_END_TOKENS=auto)")
    assert both.line().startswith("turn ends DISAGREE: the engine stops on <|im_end|> (2), <|endoftext|> (0)")
    assert both.line().endswith("set TURN_END_TOKENS=auto")


def test_a_policy_that_ends_turns_on_the_other_token_does_not_fork_when_the_stop_set_agrees(model_dir):
    client, plan = engine(model_dir, "auto", ["turn_end_other"])
    turns, choices = conversation(client)
    sequences, tally = _chain_to_sequences(turns, "r1", 0)
    assert (tally["fork"], tally["clean"], tally["transitions"], len(sequences)) == (0, 2, 2, 1)
    assert plan.stops == (IM_END,)
    # The policy did end every reply on <|endoftext|>: the engine did not stop there, so the turn closed on
    # <|im_end|> right after it and the reply's text keeps the other token.
    assert [t.output_ids[-2:] for t in turns] == [[ENDOFTEXT, IM_END]] * 3
    assert all(c["message"]["content"].endswith("<|endoftext|>") for c in choices)
    # Every sampled token trains, once, in the one row.
    trained = [tok for tok, m in zip(sequences[0].input_ids, sequences[0].completion_mask) if m]
    assert trained == [tok for t in turns for tok in t.output_ids]


def test_the_same_policy_forks_every_transition_when_the_engine_stops_on_both_tokens(model_dir):
    """The guard broken: TURN_END_TOKENS=model leaves vLLM's (and the mock's) stop set at both eos ids."""
    client, plan = engine(model_dir, "model", ["turn_end_other"])
    assert plan.stops == (IM_END, ENDOFTEXT)
    turns, _ = conversation(client)
    assert [t.output_ids[-1] for t in turns] == [ENDOFTEXT] * 3
    # The next prompt renders <|im_end|> where <|endoftext|> was sampled: the held row is no prefix of it.
    assert turns[1].prompt_ids[len(turns[0].prompt_ids) + len(turns[0].output_ids) - 1] == IM_END
    sequences, tally = _chain_to_sequences(turns, "r1", 0)
    assert (tally["fork"], tally["transitions"], len(sequences)) == (2, 2, 3)


def test_without_the_fault_the_agreed_stop_set_chains_too(model_dir):
    client, _ = engine(model_dir, "auto", [])
    turns, _ = conversation(client)
    assert [t.output_ids[-1] for t in turns] == [IM_END] * 3
    _, tally = _chain_to_sequences(turns, "r1", 0)
    assert (tally["fork"], tally["transitions"]) == (0, 2)
