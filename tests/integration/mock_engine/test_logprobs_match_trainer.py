"""The logprobs the mock engine reports for a sampled token are the ones the trainer computes for it.

The trainer scores log_softmax(logits / T) over the whole vocabulary (processed logprobs at top_p=1, top_k=0) and
TRL's importance ratio compares that with the engine's report. The mock masks some tokens while it samples a tool
call's command (lm.sample_command: backslash, control characters, special tokens); those must never be drawn, and
the report must still be the full-vocabulary figure.

Runs in the mock-engine image: tests/run-in-image mock-engine tests/integration/mock_engine
"""

import torch

from mock_engine.lm import Sampling, TinyLM

T = 1.0


def trainer_logprobs(lm: TinyLM, prompt: list[int], completion: list[int]) -> torch.Tensor:
    """What the CPU trainer computes: the same float32 weights, log_softmax(logits / T), every token."""
    with torch.no_grad():
        logits = lm.model(torch.tensor([prompt + completion])).logits[0]
    rows = torch.log_softmax(logits[len(prompt) - 1 : -1] / T, -1)
    return rows.gather(-1, torch.tensor(completion)[:, None]).squeeze(-1)


def test_masked_sampling_reports_the_full_vocabulary_logprob(model_dir):
    lm = TinyLM(str(model_dir), max_model_len=4096, max_new_tokens=48)
    prompt = lm.encode("user: list the files\nassistant:")
    vocab = len(lm.tokenizer)
    banned = frozenset(range(0, vocab, 2))  # half the vocabulary: the masked mass is far from negligible
    gen = lm.sample(prompt, Sampling(temperature=T, max_tokens=24, seed=3), banned=banned, stop_ids=frozenset())
    assert gen.token_ids and not set(gen.token_ids) & banned
    reported = torch.tensor(gen.logprobs)
    expected = trainer_logprobs(lm, prompt, gen.token_ids)
    gap = (reported - expected).abs().max().item()
    print(f"half the vocabulary banned: largest |reported - trainer| logprob gap {gap:.2e}")
    assert gap < 1e-4


def test_a_sampled_command_reports_what_the_trainer_scores(model_dir):
    lm = TinyLM(str(model_dir), max_model_len=4096, max_new_tokens=48)
    prompt = lm.encode("user: list the files\nassistant:")
    gen = lm.sample_command(prompt, '{"command": "', '"}', Sampling(temperature=T, max_tokens=48, seed=5), 24)
    expected = trainer_logprobs(lm, prompt, gen.token_ids)
    gap = (torch.tensor(gen.logprobs) - expected).abs().max().item()
    print(f"sample_command: largest |reported - trainer| logprob gap {gap:.2e} over {len(gen.token_ids)} tokens")
    assert gap < 1e-4
