"""The mock engine's Prometheus metrics (vLLM 0.31.0 names, the mock's own counters) and its `fork` fault.

Whether the fork fault really forks TRL's reconciler is shown in the image, against TRL itself
(tests/integration/trainer/test_cpu_training.py); here: what it does to a conversation.
"""

import threading
import time

from mock_engine import faults
from mock_engine.metrics import EngineMetrics

sys_msg = {"role": "system", "content": "You are a coding agent."}
user = {"role": "user", "content": "List the files."}
reply = {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "bash", "arguments": "{}"}}]}
tool = {"role": "tool", "content": "ok"}


def sample(text: str, name: str) -> float:
    (line,) = [x for x in text.splitlines() if x.startswith(name + "{")]
    assert line.startswith(name + '{engine="0",model_name="tiny"} '), line
    return float(line.rsplit(" ", 1)[1])


def test_running_waiting_kv_and_token_counters_follow_the_requests():
    m = EngineMetrics("tiny", max_num_seqs=1, max_model_len=100)
    first_in, release_first, second_in, release_second = (threading.Event() for _ in range(4))

    def first():
        with m.request(30) as held:
            m.generated(held, 10)
            first_in.set()
            release_first.wait(10)

    def second():
        with m.request(5):
            second_in.set()
            release_second.wait(10)

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    threads[0].start()
    assert first_in.wait(10)
    threads[1].start()
    for _ in range(500):
        if m.waiting:
            break
        time.sleep(0.01)
    text = m.render()
    assert sample(text, "vllm:num_requests_running") == 1.0
    assert sample(text, "vllm:num_requests_waiting") == 1.0  # the one slot is taken
    assert sample(text, "vllm:kv_cache_usage_perc") == 0.4  # (30 prompt + 10 generated) / (1 x 100)
    assert sample(text, "vllm:generation_tokens_total") == 10.0
    assert "# TYPE vllm:generation_tokens_total counter" in text
    release_first.set()
    assert second_in.wait(10)  # admitted once the first left
    text = m.render()
    assert sample(text, "vllm:num_requests_running") == 1.0 and sample(text, "vllm:num_requests_waiting") == 0.0
    assert sample(text, "vllm:kv_cache_usage_perc") == 0.05
    release_second.set()
    for t in threads:
        t.join(10)
    text = m.render()
    assert sample(text, "vllm:prompt_tokens_total") == 35.0 and sample(text, "vllm:request_success_total") == 2.0
    assert sample(text, "vllm:num_requests_running") == 0.0 and sample(text, "vllm:kv_cache_usage_perc") == 0.0


def test_a_failed_request_frees_its_slot_and_is_not_a_success():
    m = EngineMetrics("tiny", max_num_seqs=1, max_model_len=100)
    try:
        with m.request(7):
            raise RuntimeError("generation failed")
    except RuntimeError:
        pass
    text = m.render()
    assert sample(text, "vllm:num_requests_running") == 0.0 and sample(text, "vllm:kv_cache_usage_perc") == 0.0
    assert sample(text, "vllm:request_success_total") == 0.0
    with m.request(1):  # the slot is free again
        pass


def test_fork_fault_rewrites_the_conversation_start_differently_at_every_turn():
    assert faults.parse("fork").active == {"fork"}
    first_turn = [sys_msg, user]
    assert faults.rerender_history(first_turn) is first_turn  # the first prompt is what it is
    two = faults.rerender_history([sys_msg, user, reply, tool])
    three = faults.rerender_history([sys_msg, user, reply, tool, reply, tool])
    assert two[0]["content"] == "You are a coding agent. [history rendered at turn 2]"
    assert three[0]["content"] == "You are a coding agent. [history rendered at turn 3]"
    assert two[1:] == [user, reply, tool] and sys_msg["content"] == "You are a coding agent."  # input untouched
    parts = faults.rerender_history([{"role": "user", "content": [{"type": "text", "text": "hi"}]}, reply])
    assert parts[0]["content"][-1] == {"type": "text", "text": " [history rendered at turn 2]"}
