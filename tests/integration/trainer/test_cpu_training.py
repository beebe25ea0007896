"""The real trainer, 2 optimizer steps on CPU, against the mock engine and OpenEnv's real capture proxy.

Runs in the trainer image (torch, TRL, the mock engine):

    tests/run-in-image trainer tests/integration/trainer

Rollouts: a scripted multi-turn agent (scripted_agent.py) whose every model call goes through the capture
proxy; the trainer trains on the proxy's captures fed through OpenEnv's contract. Weight sync: the mock
engine's backend (WEIGHT_TRANSFER=mock). Shows: checkpoints on the bucket, the engine's logprobs change
after the sync, one training row per multi-turn rollout (no forking), a restart with the same run
name resuming at the next step, and a run made 100% forked (the mock's `fork` fault) stopped by the
forking stop rule with a checkpoint and its one line.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from cpu_engine import cpu_engine  # noqa: E402

RUN = "cpu-test"
PROBE = [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": "List the files."}]


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    # The trainer image has TRL (this suite runs only there): a broken install must fail, not skip.
    import trl  # noqa: F401

    work = tmp_path_factory.mktemp("cpu-train")
    with cpu_engine(work) as engine:
        yield {**engine, "work": work, "bucket": work / "bucket"}


def first_token_logprobs(engine_url, model):
    body = {"model": model, "messages": PROBE, "max_tokens": 1, "logprobs": True, "top_logprobs": 5, "temperature": 1.0}
    reply = httpx.post(engine_url + "/v1/chat/completions", json=body, timeout=60).raise_for_status().json()
    return sorted(
        (e["token"], round(e["logprob"], 6)) for e in reply["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
    )


def train(stack, max_steps, run=RUN, extra_env=None, expect_rc=0):
    bucket = stack["bucket"]
    bucket.mkdir(exist_ok=True)
    env = {
        **os.environ,
        "MODEL": stack["model"],
        "ENGINE_URL": stack["engine"],
        "BUCKET_DIR": str(bucket),
        "HF_HOME": str(bucket / "hf-home"),
        "BUCKET_NOT_A_MOUNT_OK": "i-accept-losing-checkpoints",
        "REQUIRED_GPUS": "0",
        "WEIGHT_TRANSFER": "mock",
        "SANDBOX": "docker",
        "TUNNEL_PROVIDER": "direct",
        "COMPOSE_PROFILES": "",
        "DATASETS": "local",
        "MIN_FREE_DISK_GB": "0",
        "RUN_NAME": run,
        "MAX_STEPS": str(max_steps),
        "NUM_GENERATIONS": "4",
        "PER_DEVICE_TRAIN_BATCH_SIZE": "4",
        "TOKEN_BUDGET": "0",
        "MAX_INFLIGHT_ROLLOUTS": "4",
        "SAVE_STEPS": "1",
        "LEARNING_RATE": "1e-2",
        "MAX_OUTPUT_TOKENS": "128",
        "AGENT_STEP_LIMIT": "3",
        "REPORT_TO": "tensorboard",
        # The mismatch rule off: at this suite's LEARNING_RATE=1e-2 the tiny policy drifts more than 0.02 nats
        # between the engine's sampling and the trainer's step, so the rule raced the forking rule and CI once saw
        # it end the forked run first. It has its own tests (test_mismatch_trl.py, tests/unit/trainer/test_stop_rules.py).
        "STOP_MISMATCH_KL": "off",
        **(extra_env or {}),
    }
    out = subprocess.run(
        [sys.executable, str(HERE / "run_trainer.py"), stack["capture"]],
        env=env,
        capture_output=True,
        text=True,
        timeout=540,
    )
    (stack["work"] / f"trainer-{run}-{max_steps}.log").write_text(out.stdout + out.stderr)
    text = out.stdout + out.stderr
    first_error = text[text.find("Traceback") :][:5000] if "Traceback" in text else ""
    assert out.returncode == expect_rc, first_error + "\n...\n" + text[-3000:]
    return out.stdout + out.stderr


def test_two_steps_then_resume(stack):
    before = first_token_logprobs(stack["engine"], stack["model"])
    log = train(stack, max_steps=2)
    run_dir = stack["bucket"] / "checkpoints" / RUN
    status = json.loads((run_dir / "status.json").read_text())

    # A checkpoint on the bucket, for each step.
    assert (run_dir / "checkpoint-2" / "trainer_state.json").is_file(), sorted(p.name for p in run_dir.iterdir())
    assert status["state"] == "finished" and status["step"] == 2 and status["last_checkpoint"] == "checkpoint-2"

    # The engine serves new weights: same prompt, different distribution.
    assert first_token_logprobs(stack["engine"], stack["model"]) != before, log[-8000:]

    # No forking: a multi-turn rollout is ONE training row. Checked over every logged window, not just the
    # last one in status.json: which rollouts land in the last window is chance (an off-script rollout is
    # one turn), and a run was once green or red on that alone.
    def windows(key):
        return [float(v) for v in re.findall(rf"'{re.escape(key)}': '([0-9.e+-]+)'", log)]

    assert windows("rollout/turns_max") and max(windows("rollout/turns_max")) > 1, status
    assert set(windows("rollout/samples_per_rollout")) == {1.0}, windows("rollout/samples_per_rollout")
    assert set(windows("harbor/forked_rollout_frac")) == {0.0}, windows("harbor/forked_rollout_frac")
    assert status["samples_per_rollout"] == 1.0 and status["forked_rollout_frac"] == 0.0, status
    assert "warm-up rollout" in log
    # The first sync goes through trainer.transfer.weights.FirstSync around the backend TRL calls: reported once.
    assert "trainer: weight transfer mock, transport mock (the mock engine's HTTP backend)" in log
    assert log.count("trainer: first weight sync done: group set up in ") == 1, log[-4000:]

    # The dashboard is on the bucket.
    assert list((stack["bucket"] / "dashboards" / "tensorboard" / RUN).glob("events.out.tfevents.*"))
    # The learning curve beside the checkpoints (trainer/report/curve.py): a row per logged step, a PNG.
    from trainer.report import curve

    first = curve.read_csv(run_dir / "curve.csv")
    assert [r["step"] for r in first] == [1, 2], first
    assert all(r["mismatch_kl_mean"] is not None for r in first), first  # TRL's `kl` at least, every step
    assert (run_dir / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # Restart with the same run name: resumes from checkpoint-2 and trains step 3.
    log = train(stack, max_steps=3)
    assert "resuming from checkpoint-2" in log
    state = json.loads((run_dir / "checkpoint-3" / "trainer_state.json").read_text())
    assert state["global_step"] == 3
    assert json.loads((run_dir / "status.json").read_text())["step"] == 3
    # The resumed curve continues: steps 1-2 rebuilt from checkpoint-2's log_history, the same figures, no
    # duplicate step.
    resumed = curve.read_csv(run_dir / "curve.csv")
    assert [r["step"] for r in resumed] == [1, 2, 3] and resumed[:2] == first, (first, resumed)
    # Retention: SAVE_TOTAL_LIMIT (default 2) reaches TRL's config, whose Trainer deletes checkpoint-1 once
    # checkpoint-3 is complete. Without it every SAVE_STEPS checkpoint stays on the bucket all night.
    assert sorted(p.name for p in run_dir.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-3"]


def test_sigterm_during_a_step_saves_that_step_and_stops(stack):
    """`docker compose stop` while a step computes: the step's checkpoint is written although SAVE_STEPS is
    far off (trainer/watch/stop.py's StopCallback sets should_save), the run stops there, and says how to resume."""
    run = "cpu-sigterm"
    # SAVE_STEPS = MAX_STEPS, the longest interval preflight accepts: no periodic checkpoint before the last step.
    log = train(stack, max_steps=6, run=run, extra_env={"SAVE_STEPS": "6", "TEST_SIGTERM_AT_STEP": "2"})
    run_dir = stack["bucket"] / "checkpoints" / run
    assert sorted(p.name for p in run_dir.glob("checkpoint-*")) == ["checkpoint-2"], log[-4000:]
    state = json.loads((run_dir / "checkpoint-2" / "trainer_state.json").read_text())
    assert state["global_step"] == 2
    status = json.loads((run_dir / "status.json").read_text())
    assert (status["state"], status["step"], status["reason"]) == ("stopped", 2, "SIGTERM: checkpoint saved"), status
    assert log.count("trainer: SIGTERM: saving a checkpoint at the next safe point, then stopping") == 1, log[-4000:]
    assert f"trainer: resume this run with RUN_NAME={run}" in log


def test_a_fully_forked_run_stops_by_rule_with_a_checkpoint_and_one_line(stack):
    """The mock's `fork` fault re-renders every turn's conversation start, as a template that renders
    history differently would: TRL's reconciler forks every transition. The forking stop rule must end
    the run at the end of its window, with a checkpoint of that step (SAVE_STEPS never reached) and one
    line naming the rule, the figures and the fix."""
    run, window = "cpu-forked", 2
    httpx.post(stack["engine"] + "/mock/faults", json={"active": ["fork"]}, timeout=10).raise_for_status()
    try:
        log = train(
            stack,
            max_steps=8,
            run=run,
            extra_env={"STOP_WINDOW_STEPS": str(window), "SAVE_STEPS": "8"},  # = MAX_STEPS: none periodic before
            expect_rc=3,
        )
    finally:
        httpx.post(stack["engine"] + "/mock/faults", json={"active": []}, timeout=10).raise_for_status()
    run_dir = stack["bucket"] / "checkpoints" / run
    status = json.loads((run_dir / "status.json").read_text())
    rule = status["stop_rule"]
    step = rule["step"]
    assert status["state"] == "stopped-by-rule" and rule["rule"] == "STOP_FORKING_FRAC", status
    # Every logged window with a turn transition forked all of them; windows without one do not count.
    assert rule["window"] == [1.0] * window and window <= step < 8 and status["step"] == step, status
    # TRL's own tally is the tell that sees this forking. harbor/forked_rollout_frac counted rows per rollout
    # and read 0.0 on this run (TRL keeps only rows with a trained token); it reads the tally now
    # (trainer/rollouts/group_metrics.forked), so it sees the forks too. Read over every logged window, not status.json's
    # last one: a window of single-turn rollouts (off-script, nothing to fork) reads 0.0 there, and CI once went
    # red on that alone while fork_frac kept its last multi-turn window's 1.0.
    forked_windows = [float(v) for v in re.findall(r"'harbor/forked_rollout_frac': '([0-9.e+-]+)'", log)]
    assert status["fork_frac"] == 1.0 and max(forked_windows, default=0.0) > 0.0, (forked_windows, status)
    lines = [ln for ln in log.splitlines() if "STOPPED by rule" in ln]
    assert lines == [
        f"trainer: STOPPED by rule STOP_FORKING_FRAC at step {step}: 100% of turn transitions forked (re-rendered "
        f"prompts) over the last {window} steps (100%, 100%), threshold 50%. Checkpoint saved; fix: the engine or "
        "chat template re-renders what it sampled: check the engine's capture level (scripts/status) and the chat "
        "template (REASONING_PARSER, CHAT_TEMPLATE_KWARGS); then resume with RUN_NAME (or set STOP_FORKING_FRAC=off)"
    ], lines
    checkpoints = sorted(p.name for p in run_dir.glob("checkpoint-*"))
    assert checkpoints == [f"checkpoint-{step}"], checkpoints
    state = json.loads((run_dir / f"checkpoint-{step}" / "trainer_state.json").read_text())
    assert state["global_step"] == step and status["last_checkpoint"] == f"checkpoint-{step}"
