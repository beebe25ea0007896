"""After every weight push the engine is asked which weights it serves (trainer/transfer/weights.py ServedVersion).

The engine here is a stand-in probe (the real mock engine's answer is checked in tests/integration/mock_engine,
test_weights.py); the backend records TRL's call order."""

from trainer.transfer.weights import ServedVersion


class Backend:
    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        return lambda *a: self.calls.append(name)


def push(served, times=1):
    for _ in range(times):
        served.pause()
        served.send_weights(iter(()))
        served.resume()


def test_an_engine_that_took_every_push_reads_in_sync():
    versions = iter([7, 8, 9])  # a mock engine that already took 7 updates (an earlier trainer process)
    served = ServedVersion(Backend(), "http://engine", probe=lambda url: (next(versions), False))
    push(served, 3)
    assert served.inner.calls == ["pause", "send_weights", "resume"] * 3
    assert served.metrics() == {"weights/engine_stale": 0.0, "weights/engine_version_lag": 0.0}


def test_a_push_the_engine_did_not_take_is_a_logged_mismatch(caplog):
    versions = iter([3, 4, 4])  # the third push did not land
    served = ServedVersion(Backend(), "http://engine", probe=lambda url: (next(versions), False))
    push(served, 2)
    assert served.metrics()["weights/engine_stale"] == 0.0
    push(served)
    assert served.metrics() == {"weights/engine_stale": 1.0, "weights/engine_version_lag": 1.0}
    assert "weight push 3: the engine serves version 4 (expected 5)" in caplog.text


def test_vllm_reports_no_version_but_a_paused_engine_is_a_mismatch():
    answers = iter([(None, False), (None, True)])
    served = ServedVersion(Backend(), "http://engine", probe=lambda url: next(answers))
    push(served)
    assert served.metrics() == {"weights/engine_stale": 0.0}
    push(served)
    assert served.metrics() == {"weights/engine_stale": 1.0}
    silent = ServedVersion(Backend(), "http://engine", probe=lambda url: (None, None))
    push(silent)
    assert silent.metrics() == {}  # an engine that says nothing: no figure rather than a made-up 0


def test_behind_counts_the_pushes_the_served_weights_miss_and_a_later_push_that_lands_clears_it():
    # Push 3 and 4 did not land, push 5 did: every push sends every weight, so after push 5 the engine serves the
    # trainer's weights (behind 0) although its update counter stays two short (lag 2).
    versions = iter([3, 4, 4, 4, 5])
    served = ServedVersion(Backend(), "http://engine", probe=lambda url: (next(versions), False))
    seen = []
    for _ in range(5):
        push(served)
        seen.append((served.behind, served.lag))
    assert seen == [(0, 0), (0, 0), (1, 1), (2, 2), (0, 2)]
    silent = ServedVersion(Backend(), "http://engine", probe=lambda url: (None, True))
    push(silent, 2)
    assert silent.behind == 0  # vLLM names no version: nothing to subtract
