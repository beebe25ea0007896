"""The GPU learning run's pure parts (tests/gpu/learn_*.py), checked here because they run on the GPU machine only
once: the verdict and its interval, the per-rollout sandbox and its namespace command, the control's client."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

GPU = Path(__file__).resolve().parents[2] / "gpu"
sys.path.insert(0, str(GPU))

import learn_control  # noqa: E402
import learn_sandbox  # noqa: E402
import learn_verdict  # noqa: E402

TASK = Path(__file__).resolve().parents[3] / "datasets/pick-answer/heldout/heldout-000"


def doc(*per_task: tuple[int, int], pass_at_k: dict | None = None) -> dict:
    rows = [{"scored": n, "passed": c} for n, c in per_task]
    # A document's own pass_at_k is ignored: the verdict recomputes the interval from the counts.
    return {"per_task": rows, "pass_at_k": pass_at_k or {"1": {"value": 1.0, "ci_low": 0.99, "ci_high": 1.0}}}


# --- the verdict ---------------------------------------------------------------------------------------------
def test_pass_at_1_is_the_pooled_rate_with_the_projects_wilson_interval():
    # 12/48: datasets/pick-answer/README.md's table gives [0.15, 0.39].
    passed, scored, value, low, high = learn_verdict.pass_at_1(doc(*[(2, 1)] * 12, *[(2, 0)] * 12))
    assert (passed, scored, value) == (12, 48, 0.25)
    assert (round(low, 2), round(high, 2)) == (0.15, 0.39)


def test_learning_clears_the_baseline_when_the_intervals_are_apart():
    base = doc(*[(4, 1)] * 24)  # 24/96 = 0.25 [0.17, 0.35]
    final = doc(*[(4, 3)] * 24)  # 72/96 = 0.75 [0.65, 0.83]
    assert learn_verdict.gate_failures(base, final, min_scored=96) == []


def test_overlapping_intervals_fail_with_one_line_naming_both():
    base = doc(*[(4, 1)] * 24)  # 0.25 [0.17, 0.35]
    final = doc(*[(4, 1)] * 12, *[(4, 2)] * 12)  # 36/96 = 0.375 [0.28, 0.48]: higher, but overlapping
    (line,) = learn_verdict.gate_failures(base, final, min_scored=96)
    assert line.startswith("held-out pass@1 0.375 [0.285, 0.475] (36/96) after training does not clear the baseline ")
    assert "0.250 [0.174, 0.345] (24/96)" in line and line.endswith("(95% Wilson intervals overlap)")


def test_touching_intervals_are_not_apart():
    base = doc((10, 5))
    assert learn_verdict.gate_failures(base, base, min_scored=1)  # identical: overlap, so a failure


def test_too_few_scored_attempts_is_a_failure_of_its_own():
    base, final = doc(*[(4, 1)] * 24), doc(*[(1, 1)] * 24)  # final: 24/24 but only 24 scored
    failures = learn_verdict.gate_failures(base, final, min_scored=86)
    assert failures == ["the final evaluation scored 24 attempts, fewer than the 86 planned"]


def test_per_step_reads_a_trainer_log_history():
    history = [
        {"step": 1, "harbor/reward_mean": 0.25, "mismatch/kl_mean": 1e-8},
        {"step": 2, "mismatch/kl_mean": 3e-4},  # a step in which no group finished scoring logs no reward
        {"step": 2, "train_runtime": 12.0},
    ]
    assert learn_verdict.per_step(history, "harbor/reward_mean") == {1: 0.25}
    assert learn_verdict.per_step(history, "mismatch/kl_mean") == {1: 1e-8, 2: 3e-4}


# --- the sandbox ----------------------------------------------------------------------------------------------
def test_each_rollout_gets_fresh_folders_and_its_own_copy_of_the_verifier(tmp_path):
    a = learn_sandbox.make_sandbox(tmp_path, TASK)
    b = learn_sandbox.make_sandbox(tmp_path, TASK)
    assert a.root != b.root and a.root.parent == tmp_path
    assert list(a.app.iterdir()) == [] and (a.logs / "agent").is_dir() and (a.logs / "verifier").is_dir()
    assert (a.tests / "test.sh").read_bytes() == (TASK / "tests/test.sh").read_bytes()
    (a.tests / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")
    assert (TASK / "tests/test.sh").read_text() != "echo 1 > /logs/verifier/reward.txt\n"
    assert (b.tests / "test.sh").read_bytes() == (TASK / "tests/test.sh").read_bytes()


def test_a_name_already_used_is_refused(tmp_path):
    learn_sandbox.make_sandbox(tmp_path, TASK, name="x")
    with pytest.raises(FileExistsError):
        learn_sandbox.make_sandbox(tmp_path, TASK, name="x")


def test_reward_missing_or_unreadable_is_unscorable_not_zero(tmp_path):
    s = learn_sandbox.make_sandbox(tmp_path, TASK)
    assert learn_sandbox.read_reward(s) is None
    s.reward_file.write_text("not a number\n")
    assert learn_sandbox.read_reward(s) is None
    s.reward_file.write_text("0\n")
    assert learn_sandbox.read_reward(s) == 0.0


def test_namespace_command_binds_the_rollouts_folders_then_runs_agent_and_verifier(tmp_path):
    s = learn_sandbox.make_sandbox(tmp_path, TASK)
    argv = learn_sandbox.namespace_argv(s, ["python3", "agent.py", "a b"], 120.7)
    assert argv[:8] == [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "--",
        "sh",
        "-c",
        learn_sandbox.NAMESPACE_SCRIPT,
    ]
    assert argv[8:] == ["learn-sandbox", str(s.app), str(s.logs), str(s.tests), "120", "python3", "agent.py", "a b"]


@pytest.mark.skipif(
    shutil.which("unshare") is None or subprocess.run(["unshare", "--mount", "true"], check=False).returncode != 0,
    reason="needs root and util-linux's unshare (the GPU machine runs as root; so does this host's CI)",
)
def test_the_real_namespace_scores_what_the_agent_wrote_and_leaves_the_host_alone(tmp_path):
    """The real thing, no stand-in: two rollouts write different answers to /app/answer.txt; each verifier sees its
    own, and the host's /app is untouched."""
    host_app = Path("/app")
    before = sorted(p.name for p in host_app.iterdir()) if host_app.is_dir() else None
    for d in ("/app", "/logs", "/tests"):
        Path(d).mkdir(exist_ok=True)
    rewards = {}
    for letter in "CA":
        s = learn_sandbox.make_sandbox(tmp_path, TASK)
        agent = ["sh", "-c", f"printf {letter} > /app/answer.txt && echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"]
        done = subprocess.run(learn_sandbox.namespace_argv(s, agent, 30), capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert (s.app / "answer.txt").read_text() == letter
        assert (s.logs / "agent" / "exit_code.txt").read_text().strip() == "0"
        rewards[letter] = learn_sandbox.read_reward(s)
    assert rewards == {"C": 1.0, "A": 0.0}
    if before is not None:
        assert sorted(p.name for p in host_app.iterdir()) == before


# --- the control ----------------------------------------------------------------------------------------------
class Recorder:
    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        return lambda *args: self.calls.append((name, *[list(a) if not isinstance(a, str) else a for a in args]))


def test_the_control_acknowledges_every_push_and_sends_nothing():
    inner = Recorder()
    client = learn_control.SkippedPushes(inner)
    client.init_weight_transfer()
    for _ in range(2):
        client.pause()
        client.send_weights(iter([("a", 1), ("b", 2), ("c", 3)]))
        client.resume()
    client.destroy()
    assert [c[0] for c in inner.calls] == ["init_weight_transfer", "pause", "resume", "pause", "resume", "destroy"]
    assert (client.skipped, client.tensors_drained) == (2, 6)


def test_wrap_build_wraps_a_named_client_and_refuses_trls_own_in_one_line():
    made = []

    def build(mode, url, timeout_s=None):
        made.append((mode, url, timeout_s))
        return None if mode == "nccl" else Recorder()

    wrapped = learn_control.wrap_build(build)
    assert isinstance(wrapped("ipc", "http://e", 60.0), learn_control.SkippedPushes)
    assert made == [("ipc", "http://e", 60.0)]
    with pytest.raises(SystemExit, match="^learn: the control cannot skip the pushes of WEIGHT_TRANSFER=nccl"):
        wrapped("nccl", "http://e")
