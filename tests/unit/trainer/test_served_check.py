"""The served-weights check (trainer/transfer/served_check.py): after each push the engine's logprobs on a canary against
the trainer's own, for every backend.

Test doubles, each saying what it stands for: `Weights` is a one-number "model" whose logprobs depend on it (no torch
on this host; the real scorer runs the trainer's model, tests/integration and the CPU form run it); `Engine` serves
the canary from the weights it holds and takes a push only when `lands` is true (the mock engine's
`weights_not_served` fault, or a vLLM that reloaded its base weights); `kernel_noise` adds the measured bf16
engine-vs-transformers gap (0.04-0.06 nats mean, 0.27 max). `engine_canary` itself is tested against an HTTP fake
speaking vLLM's /v1/completions format.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest

from trainer.transfer import weights
from trainer.transfer.served_check import (
    CANARY_PROMPT,
    CANARY_SEED,
    CANARY_TOKENS,
    TOLERANCE_NATS,
    Canary,
    CanaryUnavailable,
    ServedWeights,
    WeightsNotServed,
    engine_canary,
)
from trainer.watch import engine_gone

IDS = [5, 6, 7, 8, 9, 10]
SAMPLED = 4


def logprobs(w: float, noise: list[float] | None = None) -> list[float]:
    out = [-1.0 - w * (i + 1) for i in range(SAMPLED)]
    return [a + b for a, b in zip(out, noise or [0.0] * SAMPLED, strict=True)]


class Engine:
    """Holds weights; a push is taken only when `lands`; the backend's five methods as TRL calls them."""

    def __init__(self, w=0.0, lands=True, noise=None):
        self.w, self.lands, self.noise, self.pending = w, lands, noise, None

    def init_weight_transfer(self):
        pass

    def pause(self):
        pass

    def send_weights(self, iterator):
        self.pending = dict(iterator)["w"]

    def resume(self):
        if self.lands:
            self.w = self.pending

    def destroy(self):
        pass

    def canary(self, url, model):
        return Canary(ids=IDS, sampled=SAMPLED, logprobs=logprobs(self.w, self.noise))


class Trainer:
    def __init__(self):
        self.w = 0.0

    def score(self, ids, sampled):
        assert (ids, sampled) == (IDS, SAMPLED)
        return logprobs(self.w)


def checked(engine: Engine, trainer: Trainer) -> ServedWeights:
    check = ServedWeights(engine, "http://engine", canary=engine.canary, model_id=lambda url: "m")
    check.scorer = trainer.score
    return check


def train_and_push(check, trainer, step_w):
    trainer.w += step_w
    check.pause()
    check.send_weights(iter([("w", trainer.w)]))
    check.resume()


def test_pushes_that_land_pass_and_log_their_gap():
    engine, trainer = Engine(), Trainer()
    check = checked(engine, trainer)
    for _ in range(5):
        train_and_push(check, trainer, 0.5)
    assert check.metrics() == {"weights/served_gap_nats": 0.0, "weights/served_gap_max_nats": 0.0}


def test_bf16_kernel_noise_on_the_same_weights_stays_under_the_tolerance():
    # The measured worst token (0.27) on every token: a mean above anything measured, still a pass.
    engine, trainer = Engine(noise=[0.27, -0.27, 0.27, -0.27]), Trainer()
    check = checked(engine, trainer)
    train_and_push(check, trainer, 1.0)
    assert check.gap_mean == pytest.approx(0.27) and check.gap_mean < TOLERANCE_NATS


def test_pushes_acknowledged_but_not_served_stop_once_the_weights_drift_past_the_tolerance():
    # Mean gap after n pushes of 0.05: 0.05 * n * (1+2+3+4)/4 = 0.125 n -> 0.125, 0.25 pass, 0.375 stops (push 3).
    engine, trainer = Engine(lands=False), Trainer()
    check = checked(engine, trainer)
    train_and_push(check, trainer, 0.05)
    train_and_push(check, trainer, 0.05)
    assert check.gap_mean == pytest.approx(0.25)
    with pytest.raises(WeightsNotServed) as exc:
        train_and_push(check, trainer, 0.05)
    assert exc.value.reason() == (
        "the engine at http://engine does not serve the weights the trainer pushed: after weight push 3 its logprobs "
        "on a 4-token canary differ from the trainer's by 0.375 nats mean (max 0.600), above the 0.3 nats that bf16 "
        "kernel noise stays under (the push was acknowledged but the engine kept or reloaded other weights; check "
        "`docker compose logs engine` for a restart or a failed weight load)"
    )


def test_the_same_drift_with_pushes_that_land_never_stops():
    # Before-vs-after alone would be blind to this difference; served-vs-pushed is not.
    engine, trainer = Engine(lands=True), Trainer()
    check = checked(engine, trainer)
    for _ in range(10):
        train_and_push(check, trainer, 0.05)
    assert check.gap_mean == 0.0


def test_a_push_that_did_not_land_stops_the_run_with_a_checkpoint_and_one_line(tmp_path, capsys):
    # The engine-gone path: train.py catches EngineGone (WeightsNotServed is one), saves, and stop_run says it.
    engine, trainer = Engine(lands=False), Trainer()
    check = checked(engine, trainer)
    with pytest.raises(WeightsNotServed) as exc:
        train_and_push(check, trainer, 1.0)
    gone = exc.value
    gone.step, gone.saved = 7, "checkpoint-7"
    status = SimpleNamespace(doc={}, update=lambda **kw: status.doc.update(kw))
    s = SimpleNamespace(run_name="run-x", weight_transfer="ipc", deployment="compose")
    with pytest.raises(SystemExit) as stop:
        engine_gone.stop_run(gone, status, s, None)
    assert stop.value.code == engine_gone.EXIT_CODE == 4
    assert (
        status.doc["state"] == "stopped" and status.doc["step"] == 7 and status.doc["last_checkpoint"] == "checkpoint-7"
    )
    line = capsys.readouterr().out.strip()
    assert line.startswith("trainer: the engine at http://engine does not serve the weights the trainer pushed: ")
    assert line.endswith(
        "Stopped (exit 4); step 7 is saved (checkpoint-7). Compose does not restart the engine. To resume: "
        "`scripts/compose --one-gpu up -d engine`, then `RUN_NAME=run-x scripts/compose --one-gpu up -d trainer`"
    )
    engine_gone.faulthandler.cancel_dump_traceback_later()


def test_an_engine_without_token_ids_turns_the_check_off_without_stopping():
    engine, trainer = Engine(lands=False), Trainer()

    def no_ids(url, model):
        raise CanaryUnavailable("the engine's /v1/completions answer has no prompt_token_ids")

    check = ServedWeights(engine, "http://engine", canary=no_ids, model_id=lambda url: None)
    check.scorer = trainer.score
    for _ in range(3):
        train_and_push(check, trainer, 1.0)
    assert check.unavailable and check.metrics() == {}


def test_no_model_attached_means_no_verdict():
    engine = Engine(lands=False)
    check = ServedWeights(engine, "http://engine", canary=engine.canary, model_id=lambda url: None)
    train_and_push(check, Trainer(), 5.0)
    assert check.metrics() == {}


def test_the_check_is_outermost_so_a_first_push_not_served_is_not_a_transport_failure():
    s = SimpleNamespace(engine_url="http://engine", weight_sync_timeout_s=300, weight_transfer="ipc")
    engine, trainer = Engine(w=3.0, lands=False), Trainer()  # serves other weights, whatever is pushed
    outer, served, _ = weights.chain(engine, s, {})
    assert isinstance(outer, ServedWeights) and served.weights is outer
    outer.canary, outer.scorer = engine.canary, trainer.score
    outer.model_id = lambda url: None
    outer.init_weight_transfer()
    with pytest.raises(WeightsNotServed):
        train_and_push(outer, trainer, 0.0)


# --- engine_canary against vLLM's wire format --------------------------------------------------------------------


@pytest.fixture
def completions():
    seen = []
    answer = {}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append((self.path, body))
            data = json.dumps(answer["doc"]).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", seen, answer
    server.shutdown()


def test_the_canary_request_and_its_answer(completions):
    url, seen, answer = completions
    # vLLM 0.25+ with --return-tokens-as-token-ids: per-choice token_ids and prompt_token_ids; a stop token sampled
    # last is in token_ids and logprobs alike.
    answer["doc"] = {
        "choices": [
            {
                "text": "x",
                "token_ids": [11, 12, 13],
                "prompt_token_ids": [1, 2],
                "logprobs": {
                    "token_logprobs": [-0.5, -1.25, -2.0],
                    "tokens": ["token_id:11", "token_id:12", "token_id:13"],
                },
            }
        ]
    }
    canary = engine_canary(url, "Qwen/Qwen3-1.7B")
    assert canary == Canary(ids=[1, 2, 11, 12, 13], sampled=3, logprobs=[-0.5, -1.25, -2.0])
    path, body = seen[0]
    assert path == "/v1/completions"
    assert body == {
        "prompt": CANARY_PROMPT,
        "max_tokens": CANARY_TOKENS,
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": -1,
        "min_p": 0.0,
        "seed": CANARY_SEED,
        "logprobs": 0,
        "return_token_ids": True,
        "model": "Qwen/Qwen3-1.7B",
    }


def test_an_answer_without_token_ids_is_unavailable_not_zero(completions):
    url, _, answer = completions
    answer["doc"] = {"choices": [{"text": "x", "logprobs": {"token_logprobs": [-0.5]}}]}
    with pytest.raises(CanaryUnavailable):
        engine_canary(url, None)


class _Param:
    def __init__(self, device: str):
        self.device = type("Device", (), {"type": device})()


class _Model:
    def __init__(self, device: str):
        self.device = device

    def parameters(self):
        return iter([_Param(self.device)])


def test_the_tolerance_follows_the_trainers_compute_dtype():
    """bf16 autocast on a GPU: 0.3 nats (kernel noise measured at 0.04-0.06). Float32 on a CPU against the float32 mock:
    0.01, since on one H200 the control's drift reached only 0.281 after 15 steps and was never stopped at 0.3."""
    gpu, cpu = ServedWeights(Engine(), "http://engine"), ServedWeights(Engine(), "http://engine")
    gpu.attach(_Model("cuda"))
    cpu.attach(_Model("cpu"))
    assert (gpu.tolerance, gpu.noise) == (0.3, "bf16 kernel noise")
    assert (cpu.tolerance, cpu.noise) == (0.01, "float32 noise")
    explicit = ServedWeights(Engine(), "http://engine", tolerance=0.2)
    explicit.attach(_Model("cpu"))
    assert explicit.tolerance == 0.2


def test_in_float32_one_step_of_the_controls_drift_stops_the_run():
    # The GPU control's first push read 0.040 nats mean; a tenth of that drift is already past 0.01.
    engine, trainer = Engine(lands=False), Trainer()
    check = checked(engine, trainer)
    check.tolerance, check.noise = 0.01, "float32 noise"
    with pytest.raises(WeightsNotServed) as exc:
        train_and_push(check, trainer, 0.004)
    assert "above the 0.01 nats that float32 noise stays under" in exc.value.reason()
