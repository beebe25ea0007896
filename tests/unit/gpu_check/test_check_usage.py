"""The GPU check's sampler (tests/gpu/check_usage.py): per-process peak GPU memory attributed to the check's
roles, and the GPU's busy fraction by phase. NVML is out of reach here (no GPU): the readings are scripted
`Reading`s, in the shape the NVML and nvidia-smi readers return; the process tree is this host's real /proc."""

import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "gpu"))

import check_usage  # noqa: E402
from check_usage import Reading  # noqa: E402


class Script:
    """Readings in order, then the last one again; an Exception in the list is raised once."""

    def __init__(self, *readings):
        self.readings = list(readings)

    def __call__(self):
        item = self.readings.pop(0) if len(self.readings) > 1 else self.readings[0]
        if isinstance(item, Exception):
            raise item
        return item


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_peaks_per_role_sum_a_roles_processes_at_one_instant_and_keep_unknown_pids_apart():
    clock = Clock()
    roles = {10: "engine", 11: "engine", 20: "trainer"}
    usage = check_usage.Usage(
        Script(
            # engine's API server (10) and engine core (11) together: 500 + 50000 at once
            Reading({0: (51000, 5)}, [(0, 10, 500), (0, 11, 50000)], {0: 143771}),
            Reading({0: (80000, 90)}, [(0, 10, 500), (0, 11, 50100), (0, 20, 29000), (0, 99, 300)]),
            Reading({0: (60000, 40)}, [(0, 11, 50100), (0, 20, None)]),
        ),
        lambda: roles,
        clock=clock,
    )
    for t in (0, 1, 2):
        clock.t = 100.0 + t
        usage.sample()
    summary = usage.summary({"engine-start": (0, 0.5), "train": (1, 2)}, "NVML (pynvml)")
    assert summary["process_peak_mib"] == {"engine": 50600, "trainer": 29000, "pid 99 (not the check's)": 300}
    assert summary["process_memory_not_reported"] == ["trainer"]
    assert summary["gpu_peak_mib"] == {0: 80000} and summary["card_mib"] == {0: 143771}
    assert summary["busy_pct_mean"] == {"whole run": 45.0, "engine-start": 5.0, "train": 65.0}
    assert summary["busy_pct_series"] == [[0.0, 0, 5], [1.0, 0, 90], [2.0, 0, 40]]
    assert (summary["samples"], summary["read_errors"], summary["source"]) == (3, 0, "NVML (pynvml)")


def test_a_failed_read_is_counted_and_said_not_raised():
    usage = check_usage.Usage(
        Script(RuntimeError("NVML_ERROR_GPU_IS_LOST"), Reading({0: (1, 0)}, [])), lambda: {}, clock=Clock()
    )
    assert usage.sample() is None
    assert usage.sample() is not None
    summary = usage.summary({}, "NVML (pynvml)")
    assert (summary["read_errors"], summary["first_read_error"], summary["samples"]) == (
        1,
        "RuntimeError: NVML_ERROR_GPU_IS_LOST",
        1,
    )


def test_no_process_ever_listed_says_per_process_memory_is_unavailable_and_where_to_look():
    usage = check_usage.Usage(Script(Reading({0: (70000, 50)}, [])), lambda: {}, clock=Clock())
    usage.sample()
    usage.sample()
    assert usage.summary({}, "nvidia-smi")["process_peak_mib"] == (
        "unavailable: nvidia-smi listed no compute process in 2 samples (a PID namespace or a sandbox that hides "
        "them); the trainer's own torch peak is in trainer_torch_peak_mib"
    )


def test_the_sampler_thread_samples_every_period_until_stopped():
    usage = check_usage.Usage(Script(Reading({0: (1, 7)}, [])), lambda: {}, period_s=0.01).start()
    time.sleep(0.3)
    usage.stop()
    time.sleep(0.05)
    seen = usage.samples
    time.sleep(0.1)
    assert seen >= 5 and usage.samples == seen


def test_a_roles_grandchildren_count_as_that_role():
    # a launcher whose child runs the work, as `vllm serve` runs its engine core
    proc = subprocess.Popen(["sh", "-c", "sleep 30 & wait"])
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            roles = check_usage.process_roles({proc.pid: "engine", os.getpid(): "check"})
            kids = [pid for pid, role in roles.items() if role == "engine" and pid != proc.pid]
            if kids:
                break
            time.sleep(0.05)
        assert kids, roles
        assert check_usage.parents()[kids[0]] == proc.pid
        assert roles[os.getpid()] == "check"
    finally:
        proc.kill()
        proc.wait()


def test_parents_reads_a_command_name_with_spaces_and_parentheses(tmp_path):
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "stat").write_text("42 (vllm (engine) core) S 7 42 42 0 -1 4194560\n")
    (tmp_path / "43").mkdir()
    (tmp_path / "43" / "stat").write_text("43 (python3) S 42 42 42 0 -1 4194560\n")
    assert check_usage.parents(tmp_path) == {42: 7, 43: 42}
    assert check_usage.process_roles({7: "engine"}, lambda: check_usage.parents(tmp_path)) == {
        7: "engine",
        42: "engine",
        43: "engine",
    }


def test_no_reading_at_all_says_why_the_figures_are_missing():
    usage = check_usage.Usage(Script(FileNotFoundError(2, "No such file or directory")), lambda: {}, clock=Clock())
    usage.sample()
    assert usage.summary({}, "nvidia-smi")["process_peak_mib"] == (
        "unavailable: no reading of nvidia-smi succeeded (1 failed; first: FileNotFoundError: [Errno 2] No such file "
        "or directory)"
    )


def test_the_nvml_reader_turns_bytes_into_mib_and_an_unavailable_figure_into_none(monkeypatch):
    # NVML needs a GPU: a stand-in module with the five pynvml calls the reader makes, answering as NVML does
    import types

    gib = 2**30
    fake = types.SimpleNamespace(
        nvmlInit=lambda: None,
        nvmlDeviceGetCount=lambda: 1,
        nvmlDeviceGetHandleByIndex=lambda i: f"h{i}",
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(used=80 * gib, total=143771 * 2**20),
        nvmlDeviceGetUtilizationRates=lambda h: types.SimpleNamespace(gpu=73),
        nvmlDeviceGetComputeRunningProcesses=lambda h: [
            types.SimpleNamespace(pid=10, usedGpuMemory=50 * gib),
            types.SimpleNamespace(pid=20, usedGpuMemory=2**64 - 1),  # NVML_VALUE_NOT_AVAILABLE
            types.SimpleNamespace(pid=30, usedGpuMemory=None),
        ],
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    read = check_usage.nvml_reader()
    assert read.source == "NVML (pynvml)"
    assert read() == Reading({0: (81920, 73)}, [(0, 10, 51200), (0, 20, None), (0, 30, None)], {0: 143771})


def test_without_nvml_the_reader_is_none_and_nvidia_smi_answers(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    assert check_usage.nvml_reader() is None
    assert check_usage.smi_reader().source == "nvidia-smi"
