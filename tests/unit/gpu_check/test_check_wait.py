"""A wait of the GPU check that fails says why: what the readiness check (the production probe) last said,
and the process's last log lines. Before, the probe's verdict was thrown away and the check stopped with
`TimeoutError('engine not ready within 420s')` over an engine.log of `200 OK` lines.

The engine is the stdlib stand-in (tests/engine_standin.py) answering with a flat top-two gap of 0.2, what
the GPU check's old model gave real vLLM (0.375); the probe is the real `python -m engine.probe` process."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from engine_standin import MODEL, Engine

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "gpu"))

import check_wait  # noqa: E402

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def flat_engine():
    engine = Engine(lambda t: 0.2 / t)
    yield engine
    engine.close()


def probe_check(url: str, tmp_path: Path) -> check_wait.Readiness:
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO / "services"),
        "TMPDIR": str(tmp_path),
    }
    env.pop("ENGINE_LOGPROBS_UNPROVEN_OK", None)
    return check_wait.command_check([sys.executable, "-m", "engine.probe", url], env, timeout_s=60)


def test_a_timed_out_wait_prints_the_probes_last_words_and_the_log_tail(flat_engine, tmp_path):
    log = tmp_path / "engine.log"
    log.write_text("".join(f"line {i}\n" for i in range(100)) + 'INFO: "GET /v1/models HTTP/1.1" 200 OK\n')
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with pytest.raises(check_wait.NotReady) as err:
            check_wait.wait_until(probe_check(flat_engine.url, tmp_path), alive, "engine", 0, log=log)
    finally:
        alive.kill()
        alive.wait()
    lines = str(err.value).splitlines()
    assert lines[0] == "engine not ready within 0 s"
    assert lines[1].startswith(
        f"its readiness check last said: engine UNHEALTHY: processed logprobs not proven for {MODEL}"
    )
    assert "the top-two gap is 0.200 at temperature 1 (a flat distribution; need >= 0.5)" in lines[1]
    assert lines[2] == f"last 40 lines of {log}:"
    assert lines[3:] == [f"line {i}" for i in range(61, 100)] + ['INFO: "GET /v1/models HTTP/1.1" 200 OK']


def test_a_process_that_exits_first_is_reported_with_its_log(flat_engine, tmp_path):
    log = tmp_path / "engine.log"
    log.write_text("RuntimeError: CUDA out of memory\n")
    dead = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    dead.wait()
    ready = probe_check(flat_engine.url, tmp_path)
    with pytest.raises(check_wait.NotReady) as err:
        check_wait.wait_until(ready, dead, "engine", 420, log=log)
    assert str(err.value).splitlines() == [
        "engine exited with 3 before it was ready",
        "its readiness check last said: (the check never ran)",
        f"last 40 lines of {log}:",
        "RuntimeError: CUDA out of memory",
    ]


def test_a_ready_engine_is_waited_for_and_its_verdict_kept(tmp_path):
    engine = Engine(lambda t: 4.0 / t)
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        ready = probe_check(engine.url, tmp_path)
        check_wait.wait_until(ready, alive, "engine", 60, log=tmp_path / "absent.log")
    finally:
        alive.kill()
        alive.wait()
        engine.close()
    assert ready.said.startswith(f"engine healthy: {MODEL} returned 3 prompt ids")
    assert ready.said.endswith("logprobs mode processed")


def test_a_check_that_raises_is_not_ready_and_says_what_it_raised():
    def refused():
        raise ConnectionRefusedError(111, "Connection refused")

    ready = check_wait.Readiness(refused)
    assert ready() is False
    assert ready.said == "ConnectionRefusedError: [Errno 111] Connection refused"


def test_an_unreadable_log_is_said_so(tmp_path):
    assert check_wait.tail(tmp_path / "nope.log").startswith(f"(cannot read {tmp_path / 'nope.log'}:")
    (tmp_path / "empty.log").write_text("")
    assert check_wait.tail(tmp_path / "empty.log") == f"({tmp_path / 'empty.log'} is empty)"


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_a_wait_gets_the_lesser_of_its_own_limit_and_what_is_left_of_the_whole_checks():
    clock = Clock()
    budget = check_wait.Budget(540, clock=clock)
    assert budget.limit(420, "GPU_CHECK_ENGINE_TIMEOUT_S") == (420, "GPU_CHECK_ENGINE_TIMEOUT_S=420 s")
    clock.t = 300
    assert budget.limit(420, "GPU_CHECK_TRAIN_TIMEOUT_S") == (240, "the 240 s left of GPU_CHECK_TOTAL_TIMEOUT_S=540 s")
    clock.t = 600
    assert budget.left() == 0


def test_a_wait_names_the_limit_that_ran_out(tmp_path):
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with pytest.raises(check_wait.NotReady) as err:
            check_wait.wait_until(
                check_wait.Readiness(lambda: (False, "not yet")),
                alive,
                "engine",
                0,
                limit_name="the 0 s left of GPU_CHECK_TOTAL_TIMEOUT_S=540 s",
            )
    finally:
        alive.kill()
        alive.wait()
    assert str(err.value).splitlines() == [
        "engine not ready within the 0 s left of GPU_CHECK_TOTAL_TIMEOUT_S=540 s",
        "its readiness check last said: not yet",
    ]


def test_a_trainer_that_outlives_its_limit_is_stopped_and_its_log_shown(tmp_path):
    log = tmp_path / "trainer.log"
    log.write_text("step 1\nstep 2\n")
    trainer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    with pytest.raises(check_wait.NotReady) as err:
        check_wait.run_until(trainer, "trainer", 0.2, "GPU_CHECK_TRAIN_TIMEOUT_S=0.2 s", log=log, poll_s=0.05)
    assert trainer.poll() is not None  # stopped, not left running on the GPU
    assert str(err.value).splitlines() == [
        f"the trainer did not finish within GPU_CHECK_TRAIN_TIMEOUT_S=0.2 s; last 40 lines of {log}:",
        "step 1",
        "step 2",
    ]


def test_an_engine_that_dies_while_the_trainer_runs_stops_the_trainer_and_says_so(tmp_path):
    engine_log, trainer_log = tmp_path / "engine.log", tmp_path / "trainer.log"
    engine_log.write_text("torch.OutOfMemoryError: CUDA out of memory\n")
    trainer_log.write_text("weight push 2\n")
    engine = subprocess.Popen([sys.executable, "-c", "raise SystemExit(1)"])
    engine.wait()
    trainer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    with pytest.raises(check_wait.NotReady) as err:
        check_wait.run_until(
            trainer, "trainer", 60, "x", log=trainer_log, watch=((engine, "engine", engine_log),), poll_s=0.05
        )
    assert trainer.poll() is not None
    assert str(err.value).splitlines() == [
        "the engine exited with 1 while the trainer ran",
        f"last 40 lines of {engine_log}:",
        "torch.OutOfMemoryError: CUDA out of memory",
        f"last 40 lines of {trainer_log}:",
        "weight push 2",
    ]


def test_a_trainer_that_finishes_returns_its_seconds_and_keeps_its_exit_code(tmp_path):
    trainer = subprocess.Popen([sys.executable, "-c", "raise SystemExit(4)"])
    assert check_wait.run_until(trainer, "trainer", 60, "x", poll_s=0.05) < 60
    assert trainer.returncode == 4
