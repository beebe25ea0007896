"""vLLM's wire format from the mock engine, with logprobs checked against the model itself."""

import json

import requests
import torch
from mock_engine_support import BASH_TOOL, SCRIPT_ACTIONS, SCRIPT_MATCH, SERVED, set_faults


def chat(engine, messages, **kw):
    body = {"model": SERVED, "messages": messages, "logprobs": True, "return_token_ids": True, "max_tokens": 128, **kw}
    resp = requests.post(f"{engine}/v1/chat/completions", json=body, timeout=120)
    assert resp.status_code == 200, resp.text
    return resp.json()


def model_logprobs(hf, prompt_ids, token_ids, temperature):
    _, model = hf
    with torch.no_grad():
        logits = model(torch.tensor([prompt_ids + token_ids])).logits[0]
    rows = logits[len(prompt_ids) - 1 : len(prompt_ids) - 1 + len(token_ids)] / temperature
    return torch.log_softmax(rows, -1).gather(1, torch.tensor(token_ids)[:, None])[:, 0].tolist()


def test_models_lists_max_model_len(engine):
    (model,) = requests.get(f"{engine}/v1/models", timeout=10).json()["data"]
    assert model["id"] == SERVED and model["max_model_len"] == 32768


def test_chat_returns_ids_and_processed_logprobs_of_the_real_model(engine, hf):
    tok, _ = hf
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "List the files."}]
    out = chat(engine, messages, temperature=0.7, seed=11, top_logprobs=3)
    choice = out["choices"][0]
    expected_prompt = tok.encode(
        tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False), add_special_tokens=False
    )
    assert out["prompt_token_ids"] == expected_prompt
    ids = choice["token_ids"]
    entries = choice["logprobs"]["content"]
    assert [e["token"] for e in entries] == [f"token_id:{i}" for i in ids]
    expected = model_logprobs(hf, out["prompt_token_ids"], ids, 0.7)
    assert all(abs(e["logprob"] - x) < 1e-4 for e, x in zip(entries, expected))
    top = entries[0]["top_logprobs"]
    assert len(top) == 3 and top[0]["logprob"] >= top[1]["logprob"] >= top[2]["logprob"]
    text_ids = ids[:-1] if choice["finish_reason"] == "stop" else ids
    assert tok.decode(text_ids) == (choice["message"]["content"] or "")
    assert out["usage"]["completion_tokens"] == len(ids)


def next_prompt(engine, messages, reply, tools):
    message = {k: reply["choices"][0]["message"][k] for k in ("role", "content", "tool_calls")}
    follow = messages + [message]
    follow.append(
        {"role": "tool", "tool_call_id": "x", "content": "README.md"}
        if message["tool_calls"]
        else {"role": "user", "content": "Use the bash tool."}
    )
    return follow, chat(engine, follow, tools=tools, max_tokens=4, seed=99)


def test_turns_chain_exactly_for_free_samples_and_tool_calls(engine):
    """Re-rendering a conversation reproduces the sampled ids: the next prompt starts with prompt + completion."""
    seen_tool_call = seen_plain = False
    for seed in range(8):
        # Not a scripted task: free samples (plain text) and, with the tool offered, whatever the model writes.
        for content, tools in ((f"{SCRIPT_MATCH}: inspect the repository", [BASH_TOOL]), ("say something", None)):
            messages = [{"role": "user", "content": content}]
            first = chat(engine, messages, tools=tools, seed=seed, temperature=1.0)
            c = first["choices"][0]
            seen_tool_call |= bool(c["message"]["tool_calls"])
            seen_plain |= not c["message"]["tool_calls"]
            _, second = next_prompt(engine, messages, first, tools)
            prefix = first["prompt_token_ids"] + c["token_ids"]
            assert second["prompt_token_ids"][: len(prefix)] == prefix, seed
    assert seen_tool_call and seen_plain


def test_off_script_the_model_writes_its_own_command_in_a_valid_call(engine, hf):
    """On a scripted task, an off-script turn is still a `bash` call the agent accepts (a plain-text
    turn is dropped from mini-swe-agent's history, which forks the rollout), with a command the model
    sampled, and the reply's logprobs are the model's own where the call's frame was forced."""
    messages = [{"role": "user", "content": f"Task {SCRIPT_MATCH}: make the tests pass"}]
    off_script = 0
    for seed in range(12):
        reply = chat(engine, messages, tools=[BASH_TOOL], seed=seed, temperature=1.0)
        c = reply["choices"][0]
        (call,) = c["message"]["tool_calls"]
        command = json.loads(call["function"]["arguments"])["command"]
        if command == SCRIPT_ACTIONS[0]:
            continue
        off_script += 1
        assert call["function"]["name"] == "bash" and c["finish_reason"] == "tool_calls"
        assert len(c["logprobs"]["content"]) == len(c["token_ids"])
        # The frame up to the command's opening quote is scored, not sampled: the model's exact logprobs.
        frame = len('<tool_call>\n{"name": "bash", "arguments": {"command": "')
        expected = model_logprobs(hf, reply["prompt_token_ids"], c["token_ids"], 1.0)
        got = [e["logprob"] for e in c["logprobs"]["content"]]
        assert all(abs(a - b) < 1e-4 for a, b in zip(got[:frame], expected[:frame]))
        _, second = next_prompt(engine, messages, reply, [BASH_TOOL])
        prefix = reply["prompt_token_ids"] + c["token_ids"]
        assert second["prompt_token_ids"][: len(prefix)] == prefix
    assert off_script, "every one of 12 rollouts followed the script at MOCK_SCRIPT_PROB=0.5"


def test_scripted_rollouts_follow_the_actions_then_submit(engine, hf):
    messages = [{"role": "user", "content": f"Task {SCRIPT_MATCH}: make the tests pass"}]
    scripted = None
    for seed in range(20):
        reply = chat(engine, messages, tools=[BASH_TOOL], seed=seed)
        calls = reply["choices"][0]["message"]["tool_calls"]
        if calls and json.loads(calls[0]["function"]["arguments"])["command"] == SCRIPT_ACTIONS[0]:
            scripted = reply
            break
    assert scripted is not None, "no rollout out of 20 followed the script at MOCK_SCRIPT_PROB=0.5"
    commands = []
    reply = scripted
    for _ in range(len(SCRIPT_ACTIONS) + 1):
        c = reply["choices"][0]
        assert c["finish_reason"] == "tool_calls" and c["message"]["content"] is None
        (call,) = c["message"]["tool_calls"]
        assert call["function"]["name"] == "bash"
        commands.append(json.loads(call["function"]["arguments"])["command"])
        # Token ids cover the whole generated text, and the logprobs are the model's own.
        logprobs = [e["logprob"] for e in c["logprobs"]["content"]]
        expected = model_logprobs(hf, reply["prompt_token_ids"], c["token_ids"], 1.0)
        assert all(abs(a - b) < 1e-4 for a, b in zip(logprobs, expected))
        assert len(logprobs) == len(c["token_ids"])
        messages = messages + [
            {k: c["message"][k] for k in ("role", "content", "tool_calls")},
            {"role": "tool", "tool_call_id": call["id"], "content": "ok"},
        ]
        reply = chat(engine, messages, tools=[BASH_TOOL], seed=1000)
    assert commands == SCRIPT_ACTIONS + ["echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"]


def test_completions_with_token_id_prompt_as_trl_sends_it(engine, hf):
    tok, _ = hf
    prompt_ids = tok.encode("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)
    body = {
        "model": SERVED,
        "prompt": prompt_ids,
        "max_tokens": 16,
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": -1,
        "repetition_penalty": 1.0,
        "n": 1,
        "return_token_ids": True,
        "logprobs": 0,
        "seed": 5,
    }
    out = requests.post(f"{engine}/v1/completions", json=body, timeout=60).json()
    choice = out["choices"][0]
    assert choice["prompt_token_ids"] == prompt_ids
    assert len(choice["logprobs"]["token_logprobs"]) == len(choice["token_ids"]) > 0
    assert choice["logprobs"]["tokens"] == [f"token_id:{i}" for i in choice["token_ids"]]
    expected = model_logprobs(hf, prompt_ids, choice["token_ids"], 1.0)
    assert all(abs(a - b) < 1e-4 for a, b in zip(choice["logprobs"]["token_logprobs"], expected))


def test_errors_in_vllm_shape(engine):
    too_long = [{"role": "user", "content": "x" * 33000}]
    resp = requests.post(f"{engine}/v1/chat/completions", json={"model": SERVED, "messages": too_long}, timeout=120)
    assert resp.status_code == 400 and "maximum context length is 32768" in resp.json()["error"]["message"]
    resp = requests.post(
        f"{engine}/v1/chat/completions",
        json={"model": "other", "messages": [{"role": "user", "content": "hi"}]},
        timeout=30,
    )
    assert resp.status_code == 404
    set_faults(engine, active=[], error_status=503)
    resp = requests.post(
        f"{engine}/v1/chat/completions",
        json={"model": SERVED, "messages": [{"role": "user", "content": "hi"}]},
        timeout=30,
    )
    assert resp.status_code == 503 and resp.json()["error"]["code"] == 503


def test_slow_fault_still_answers_correctly(engine):
    set_faults(engine, active=[], slow_s=0.2)
    assert requests.get(f"{engine}/mock/faults", timeout=10).json()["slow_s"] == 0.2
    out = chat(engine, [{"role": "user", "content": "hi"}], max_tokens=2)
    assert out["choices"][0]["token_ids"]


def test_the_tokenizer_loads_verbatim_and_round_trips(hf):
    """AutoTokenizer (as the trainer loads it) must keep our tokenizer.json: transformers 5.17 rebuilt a
    byte-level Qwen2Tokenizer for a qwen2 config and silently dropped every space (measured)."""
    tok, _ = hf
    for text in ["a b\tc\n\n  d", "x <|im_end|> y", '{"command": "ls -la"}', "~!@#$%^&*()_+`-=[]{}|;':\",./<>?"]:
        ids = tok.encode(text, add_special_tokens=False)
        assert tok.decode(ids) == text
        assert tok.encode(tok.decode(ids), add_special_tokens=False) == ids
    assert tok.decode(tok.encode("wörld", add_special_tokens=False)) == "w?rld"  # outside the vocabulary: "?"


def test_max_tokens_binds_the_script_too(engine):
    """A scripted call cut by max_tokens comes back as text with finish_reason length, as from a real model."""
    messages = [{"role": "user", "content": f"Task {SCRIPT_MATCH}: make the tests pass"}]
    for seed in range(20):
        reply = chat(engine, messages, tools=[BASH_TOOL], seed=seed, max_tokens=20)
        c = reply["choices"][0]
        assert c["message"]["tool_calls"] == [] and len(c["token_ids"]) <= 20
        if c["message"]["content"].startswith("<tool_call>"):
            assert c["finish_reason"] == "length"
            return
    raise AssertionError("no scripted rollout among 20 seeds")
