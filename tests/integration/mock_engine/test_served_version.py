"""The trainer asks the real mock engine which weights it serves after a push (trainer/transfer/weights.py served_version).

Runs in the mock-engine image: tests/run-in-image mock-engine tests/integration/mock_engine
"""

import torch
from transformers import AutoModelForCausalLM

from mock_engine.weight_client import MockWeightTransfer
from stack.backends import WEIGHT_TRANSFERS
from trainer.transfer.weights import ServedVersion, served_version

ROUTE = WEIGHT_TRANSFERS.get("mock").version_route


def test_each_push_moves_the_version_the_engine_reports(engine, model_dir):
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    start, paused = served_version(engine, ROUTE)
    assert isinstance(start, int) and paused is False
    served = ServedVersion(MockWeightTransfer(engine), engine, ROUTE)
    served.init_weight_transfer()
    for _ in range(2):
        served.pause()
        assert served_version(engine, ROUTE)[1] is True  # paused between pause() and resume()
        served.send_weights((n, p.detach()) for n, p in model.named_parameters())
        served.resume()
    assert served_version(engine, ROUTE) == (start + 2, False)
    assert served.metrics() == {"weights/engine_stale": 0.0, "weights/engine_version_lag": 0.0}
    # A push that never reached the engine (its transfer skipped): the next probe sees the old version.
    served.pause()
    served.inner.resume()
    served.resume()
    assert served.metrics() == {"weights/engine_stale": 1.0, "weights/engine_version_lag": 1.0}
