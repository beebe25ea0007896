"""The gate a pre-spawned rollout child waits at (trainer/rollouts/rollout_gate.py), across a real spawned process:
it holds until opened and then hands over the start index; a closed gate or a dead parent releases the
child without a start index, so no rollout starts. TRL's side (the worker's prestart/start, the resume
position) is tested in the trainer image: tests/integration/trainer/test_early_rollout_child.py."""

import multiprocessing as mp
import os
import subprocess
import sys
import textwrap
import time

import pytest

from trainer.rollouts.rollout_gate import StartGate


@pytest.fixture
def gate():
    """The trainer's own gate, in a new folder of the system's temporary space; removed as the worker does."""
    made = StartGate.create()
    yield made
    made.remove()


def _child(path: str, out) -> None:
    out.put(StartGate(path).wait(poll_s=0.02))


def spawn_waiter(gate: StartGate):
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    proc = ctx.Process(target=_child, args=(gate.path, out), daemon=True)
    proc.start()
    return proc, out


def test_the_child_waits_until_opened_and_gets_the_start_index(gate):
    proc, out = spawn_waiter(gate)
    time.sleep(1.0)
    assert proc.is_alive() and out.empty()  # held: nothing starts before the trainer's start()
    gate.open(7)
    assert out.get(timeout=30) == 7
    proc.join(timeout=30)
    assert proc.exitcode == 0


def test_a_closed_gate_releases_the_child_without_a_start(gate):
    proc, out = spawn_waiter(gate)
    gate.close()
    assert out.get(timeout=30) is None
    proc.join(timeout=30)


def test_close_after_open_changes_nothing(gate):
    gate.open(0)
    gate.close()  # the trainer's final stop() after a run that did start
    assert StartGate(gate.path).wait() == 0


def test_a_child_whose_parent_died_leaves_without_a_start(gate, tmp_path):
    # The parent is a separate interpreter that spawns the waiter, reports its pid, then is SIGKILLed
    # (what `docker kill` does to a trainer mid-start): the orphaned child must not wait forever.
    result = tmp_path / "result"
    program = textwrap.dedent(
        f"""
        import multiprocessing as mp, sys, time
        sys.path[:0] = {sys.path!r}
        from trainer.rollouts.rollout_gate import StartGate

        def child(path, result):
            start = StartGate(path).wait(poll_s=0.02)
            open(result, "w").write(repr(start))

        if __name__ == "__main__":
            proc = mp.get_context("spawn").Process(target=child, args=({gate.path!r}, {str(result)!r}))
            proc.start()
            print(proc.pid, flush=True)
            time.sleep(600)
        """
    )
    script = tmp_path / "parent.py"
    script.write_text(program)
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    child_pid = int(parent.stdout.readline())
    time.sleep(1.0)
    parent.kill()
    parent.wait(timeout=30)
    deadline = time.monotonic() + 30
    while not result.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert result.read_text() == "None"
    for _ in range(100):  # the child exits once it returned
        try:
            os.kill(child_pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"child {child_pid} still running")


def test_remove_takes_the_gates_folder_and_a_later_close_writes_nothing():
    """The worker removes its gate when it stops (a folder per trainer start was left in /tmp: 56 after
    one test run); TRL and train.py both stop the worker, so close() may come after the removal."""
    gate = StartGate.create()
    folder = os.path.dirname(gate.path)
    assert os.path.basename(folder).startswith("asyncgrpo-rollout-gate-")
    gate.close()
    assert os.listdir(folder) == ["gate.json"]
    gate.remove()
    assert not os.path.exists(folder)
    gate.close()
    gate.remove()
    assert not os.path.exists(folder)
