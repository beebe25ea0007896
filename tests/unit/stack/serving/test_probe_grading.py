"""The healthcheck's verdict on completion payloads: each failure names the vLLM flag that fixes it.

The live probe against a running engine is tested in tests/integration/mock_engine (it needs torch)."""

from stack.serving.probe import grade_completion, logprobs_mode, top_two_gap


def payload(ids=(5, 7, 2), prompt=(1, 2, 3), labels=None, with_ids=True):
    labels = labels or [f"token_id:{i}" for i in ids]
    return {
        "prompt_token_ids": list(prompt) if prompt else None,
        "choices": [
            {
                "token_ids": list(ids) if with_ids else None,
                "logprobs": {"content": [{"token": t, "logprob": -0.5, "top_logprobs": []} for t in labels]},
            }
        ],
    }


def test_a_vllm_with_both_flags_passes():
    assert grade_completion(payload()) == []


def test_missing_ids_name_the_flag():
    problems = grade_completion(payload(with_ids=False, prompt=None))
    assert len(problems) == 2
    assert all("--return-tokens-as-token-ids" in p for p in problems)


def test_string_tokens_mean_the_flag_is_missing_even_with_ids():
    problems = grade_completion(payload(labels=["he", "llo", ""]))
    assert problems and "--return-tokens-as-token-ids" in problems[0]


def test_misaligned_channels_are_refused():
    bad = payload(labels=["token_id:5", "token_id:9", "token_id:2"])
    assert "not 'token_id:7'" in grade_completion(bad)[0]
    short = payload(labels=["token_id:5"])
    assert "misaligned" in grade_completion(short)[0]


def test_no_logprobs_names_both_flags():
    p = payload()
    p["choices"][0]["logprobs"] = None
    (problem,) = grade_completion(p)
    assert "--logprobs-mode processed_logprobs" in problem


def test_logprobs_mode_reads_the_temperature_gap():
    assert logprobs_mode(2.0, 1.0) == "processed"
    assert logprobs_mode(2.0, 1.98) == "raw"
    assert logprobs_mode(0.3, 0.15) == "unknown"
    assert logprobs_mode(None, 1.0) == "unknown"


def test_top_two_gap_ignores_sentinels():
    def one(values):
        return {"choices": [{"logprobs": {"content": [{"top_logprobs": [{"logprob": v} for v in values]}]}}]}

    assert abs(top_two_gap(one([-3.0, -0.5, -1.25])) - 0.75) < 1e-9
    assert top_two_gap(one([0.0, -9999.0])) is None
