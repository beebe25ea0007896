"""The served-weights check (trainer/transfer/served_check.py) against the real mock engine and the real scorer: the
canary scored by the engine over /v1/completions and by the trainer's model (model_scorer), pushes that land and a
push the engine acknowledges without serving (its `weights_not_served` fault).

Runs in the mock-engine image: tests/run-in-image mock-engine tests/integration/mock_engine
"""

import pytest
import torch
from mock_engine_support import set_faults
from transformers import AutoModelForCausalLM

from mock_engine.weight_client import MockWeightTransfer
from trainer.transfer.served_check import FLOAT32_TOLERANCE_NATS, TOLERANCE_NATS, ServedWeights, WeightsNotServed


def push(check, model):
    check.pause()
    check.send_weights((n, p.detach()) for n, p in model.named_parameters())
    check.resume()


def test_landed_pushes_agree_and_an_unserved_push_stops(engine, model_dir):
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    base = {n: p.detach().clone() for n, p in model.named_parameters()}
    check = ServedWeights(MockWeightTransfer(engine), engine)
    check.attach(model)
    check.init_weight_transfer()
    try:
        push(check, model)
        # float32 on both sides, the same weights: agreement far below the tolerance (tests/learning measured ~1e-8
        # nats KL between them).
        assert check.gap_mean < 1e-3, check.metrics()
        torch.manual_seed(0)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 0.1 * (p.std() if p.numel() > 1 else 1.0))
        push(check, model)  # a real change, and it landed: still in agreement
        assert check.gap_mean < 1e-3, check.metrics()
        set_faults(engine, active=["weights_not_served"])
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 0.5 * (p.std() if p.numel() > 1 else 1.0))
        with pytest.raises(WeightsNotServed) as exc:
            push(check, model)
        assert check.tolerance == FLOAT32_TOLERANCE_NATS and check.gap_mean > TOLERANCE_NATS
        assert "does not serve the weights the trainer pushed: after weight push 3" in exc.value.reason()
        print(f"\nserved-weights check: landed pushes ~0, unserved push {check.gap_mean:.3f} nats mean")
    finally:
        set_faults(engine, active=[])
        with torch.no_grad():
            for n, p in model.named_parameters():
                p.copy_(base[n])
        check.inner.pause()
        check.inner.send_weights((n, p.detach()) for n, p in model.named_parameters())
        check.inner.resume()  # the session's engine serves the base weights again, for the tests after this one
