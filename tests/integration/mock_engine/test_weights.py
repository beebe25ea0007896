"""Weight updates through the trainer-side backend (mock_engine.weight_client) change what the mock serves."""

import copy

import pytest
import requests
import torch
from mock_engine_support import SERVED

from mock_engine.weight_client import MockWeightTransfer


def trainer_manifest(model):
    """What AsyncGRPOTrainer declares (trl.experimental.async_grpo: `_iter_vllm_named_params`)."""
    try:
        from trl.experimental.async_grpo.async_grpo_trainer import _iter_vllm_named_params

        params = list(_iter_vllm_named_params(model))
    except ImportError:  # the mock-engine image has no trl; the trainer image (built FROM it) does
        params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    return {
        "names": [n for n, _ in params],
        "dtype_names": [str(p.dtype).split(".")[-1] for _, p in params],
        "shapes": [list(p.shape) for _, p in params],
    }


def first_position_logprobs(engine, prompt_ids):
    body = {
        "model": SERVED,
        "prompt": prompt_ids,
        "max_tokens": 1,
        "temperature": 1.0,
        "logprobs": 100,
        "return_token_ids": True,
        "seed": 0,
    }
    top = requests.post(f"{engine}/v1/completions", json=body, timeout=60).json()["choices"][0]["logprobs"][
        "top_logprobs"
    ][0]
    return {int(k.split(":")[1]): v for k, v in top.items()}


def local_logprobs(model, prompt_ids):
    with torch.no_grad():
        return torch.log_softmax(model(torch.tensor([prompt_ids])).logits[0, -1], -1)


def send(engine, model):
    client = MockWeightTransfer(engine)
    client.init_weight_transfer()
    client.pause()
    assert requests.get(f"{engine}/is_paused", timeout=10).json()["is_paused"] is True
    client.send_weights((n, p.detach()) for n, p in model.named_parameters())
    client.resume()
    client.destroy()
    return client.last_result


def test_both_sides_agree_on_names_dtypes_and_shapes(engine, hf):
    _, model = hf
    served = requests.get(f"{engine}/mock/weight_manifest", timeout=10).json()
    mine = trainer_manifest(model)
    assert (served["names"], served["dtype_names"], served["shapes"]) == (
        mine["names"],
        mine["dtype_names"],
        mine["shapes"],
    )
    # TRL's own declaration call (VLLMClient.update_weights posts this JSON) is accepted as-is...
    assert requests.post(f"{engine}/start_weight_update", json={"is_checkpoint_format": True}, timeout=10).ok
    assert requests.post(f"{engine}/update_weights", json={"update_info": mine}, timeout=10).ok
    # ...and finishing without the tensors applies nothing and says why.
    resp = requests.post(f"{engine}/finish_weight_update", timeout=10)
    assert resp.status_code == 400 and "never arrived" in resp.json()["error"]["message"]


def test_a_weight_update_changes_the_served_logprobs(engine, hf):
    tok, model = hf
    prompt = tok.encode("<|im_start|>user\nfix the bug<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)
    before = first_position_logprobs(engine, prompt)
    reference = local_logprobs(model, prompt)
    assert all(abs(v - reference[t].item()) < 1e-4 for t, v in before.items())

    updated = copy.deepcopy(model)
    with torch.no_grad():
        gen = torch.Generator().manual_seed(0)
        for p in updated.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.05)
    result = send(engine, updated)
    try:
        assert result["updated"] == len(list(model.parameters())) and result["untouched"] == 0
        after = first_position_logprobs(engine, prompt)
        expected = local_logprobs(updated, prompt)
        assert max(abs(after[t] - before[t]) for t in before) > 1e-3
        assert all(abs(v - expected[t].item()) < 1e-4 for t, v in after.items())
    finally:
        send(engine, model)  # the session's engine is shared: put the built weights back
    restored = first_position_logprobs(engine, prompt)
    assert all(abs(restored[t] - before[t]) < 1e-5 for t in before)


def test_a_mismatched_trainer_model_is_refused_before_bytes_move(engine, hf):
    _, model = hf
    client = MockWeightTransfer(engine)
    client.init_weight_transfer()
    bf16 = ((n, p.detach().to(torch.bfloat16)) for n, p in model.named_parameters())
    with pytest.raises(RuntimeError, match=r"is bfloat16\[.*\] in the trainer but float32"):
        client.send_weights(bf16)
    with pytest.raises(RuntimeError, match="does not exist in the mock engine's model"):
        client.send_weights(iter([("model.extra.weight", torch.zeros(2))]))


def test_the_server_refuses_a_wrong_shape_and_stray_finish(engine):
    from safetensors.torch import save

    assert requests.post(f"{engine}/start_weight_update", json={}, timeout=10).ok
    blob = save({"lm_head.weight": torch.zeros(3, 3)})
    resp = requests.post(
        f"{engine}/update_weights", data=blob, headers={"Content-Type": "application/octet-stream"}, timeout=10
    )
    assert (
        resp.status_code == 400
        and "'lm_head.weight' is float32[3, 3] from the trainer" in resp.json()["error"]["message"]
    )
    assert (
        requests.post(f"{engine}/finish_weight_update", timeout=10).status_code == 200
    )  # nothing staged, nothing applied
    resp = requests.post(f"{engine}/finish_weight_update", timeout=10)
    assert resp.status_code == 400 and "without start_weight_update" in resp.json()["error"]["message"]


def test_trl_introspection_routes(engine):
    assert requests.get(f"{engine}/get_world_size", timeout=10).json() == {"world_size": 1}
    info = requests.get(f"{engine}/server_info", params={"config_format": "json"}, timeout=10).json()["vllm_config"]
    assert info["model_config"]["dtype"] == "torch.float32"
    assert info["lora_config"] is None and info["parallel_config"]["data_parallel_size"] == 1
    assert requests.post(f"{engine}/init_weight_transfer_engine", json={"init_info": {"world_size": 2}}, timeout=10).ok


def test_weights_not_served_fault_acknowledges_and_counts_but_keeps_serving_the_old_weights(engine, hf):
    """The learning gate's control (tests/learning): a push that every handshake calls a success, a served
    version that moves, and the base weights still answering. Only a reward that does not rise can tell."""
    tok, model = hf
    prompt = tok.encode("<|im_start|>user\nfix the bug<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)
    before = first_position_logprobs(engine, prompt)
    version = requests.get(f"{engine}/mock/weight_manifest", timeout=10).json()["weight_version"]
    updated = copy.deepcopy(model)
    with torch.no_grad():
        for p in updated.parameters():
            p.add_(0.05)
    requests.post(f"{engine}/mock/faults", json={"active": ["weights_not_served"]}, timeout=10).raise_for_status()
    try:
        result = send(engine, updated)
    finally:
        requests.post(f"{engine}/mock/faults", json={"active": []}, timeout=10).raise_for_status()
    assert result["updated"] == len(list(model.parameters())) and result["weight_version"] == version + 1
    after = first_position_logprobs(engine, prompt)
    assert all(abs(after[t] - before[t]) < 1e-6 for t in before)


def test_hold_pause_fault_holds_a_push_open_until_it_is_switched_off(engine):
    """The fault suite's way to kill the engine during a weight push (tests/faults): `/pause` does not answer while
    the fault is on, while /health and the fault switch itself still do."""
    import threading
    import time

    requests.post(f"{engine}/mock/faults", json={"active": ["hold_pause"]}, timeout=10).raise_for_status()
    answered: list[float] = []
    t0 = time.monotonic()
    push = threading.Thread(
        target=lambda: answered.append(
            requests.post(f"{engine}/pause", params={"mode": "keep"}, timeout=60).status_code
        )
    )
    push.start()
    try:
        push.join(timeout=2.0)
        assert answered == [] and push.is_alive()  # held
        assert requests.get(f"{engine}/health", timeout=5).status_code == 200
        assert requests.get(f"{engine}/is_paused", timeout=5).json() == {"is_paused": False}  # not paused yet
    finally:
        requests.post(f"{engine}/mock/faults", json={"active": []}, timeout=10).raise_for_status()
    push.join(timeout=5.0)
    assert answered == [200] and 2.0 <= time.monotonic() - t0 < 7.0
    assert requests.get(f"{engine}/is_paused", timeout=5).json() == {"is_paused": True}
    requests.post(f"{engine}/resume", timeout=10).raise_for_status()
