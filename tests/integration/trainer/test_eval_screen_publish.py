"""Baseline evaluation, task screening, a short training run with one periodic evaluation, and the Hub
push, end to end on CPU: the real trainer (TRL AsyncGRPO), OpenEnv's real capture proxy in front of the
mock engine, and the real huggingface_hub client pointed (HF_ENDPOINT) at a local stand-in of the Hub's
HTTP API (tests/standins/hub.py; the Hub itself is unreachable here).

    tests/run-in-image trainer tests/integration/trainer/test_eval_screen_publish.py

The agent is the scripted one (scripted_agent.py); eval rollouts go through the proxy with OpenEnv's eval
purpose and eval sampling. Task "List the files in the repository." follows the mock engine's known-good
script in half the rollouts (solved sometimes); "Say hello." never matches the script (never solved).
Numbers are meaningless; the plumbing is what is tested.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "standins"))
from cpu_engine import cpu_engine  # noqa: E402
from hub import HubStandin  # noqa: E402
from scripted_agent import ScriptedAgentRunner  # noqa: E402

RUN = "eval-test"
TASKS = ["List the files in the repository.", "Say hello."]
TOKEN = "hf_test_token_not_a_secret"


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    # The trainer image has TRL (this suite runs only there): a broken install must fail, not skip.
    import trl  # noqa: F401

    work = tmp_path_factory.mktemp("eval-screen-publish")
    bucket = work / "bucket"
    bucket.mkdir()
    with cpu_engine(work) as engine:
        model_dir, engine_url, capture_url = engine["model"], engine["engine"], engine["capture"]
        with HubStandin(work / "hub", token=TOKEN, user="me") as hub:
            env = {
                "MODEL": str(model_dir),
                "ENGINE_URL": engine_url,
                "BUCKET_DIR": str(bucket),
                "HF_HOME": str(bucket / "hf-home"),
                "DATASETS": "local",
                "EVAL_DATASETS": "local",
                "EVAL_ATTEMPTS": "2",
                "EVAL_CONCURRENCY": "2",
                "TEMPERATURE": "1.0",
                "HUB_MODEL_ID": "me/tiny-harbor",
                "HUB_TOKEN": TOKEN,
                "HF_ENDPOINT": hub.url,
                "HUB_RETRY_S": "1",
            }
            runner = ScriptedAgentRunner(capture_url=capture_url, model=str(model_dir))
            yield {"work": work, "env": env, "bucket": bucket, "hub": hub, "runner": runner, "tasks": TASKS}


def test_baseline_screen_train_with_eval_and_publish(stack, monkeypatch, capsys):
    from trainer.evaluation import evaluate, screen

    for k, v in stack["env"].items():
        monkeypatch.setenv(k, v)
    runner = ScriptedAgentRunner(capture_url=stack["runner"].capture_url, model=stack["runner"].model, tasks=TASKS)
    bucket = stack["bucket"]
    t0 = time.monotonic()

    # 1. Baseline: the standalone command's code path, writing JSON and Markdown on the bucket.
    assert evaluate.main(["--name", "baseline", "--label", "base tiny"], runner=runner) == 0
    baseline = json.loads((bucket / "evals" / "baseline" / "eval.json").read_text())
    assert (baseline["tasks"], baseline["attempts"], baseline["attempts_per_task"]) == (2, 4, 2)
    assert baseline["sampling"] == {"temperature": 0.6, "top_p": 0.95} and baseline["held_out"] is False
    assert baseline["scored_attempts"] == 4 and baseline["pass_at_k"]["1"]["method"] == "wilson-95"
    assert "| base tiny | local (trained on) | 2 | 4 / 4 |" in (bucket / "evals" / "baseline" / "eval.md").read_text()
    t_baseline = time.monotonic() - t0

    # 2. Screening: 10 attempts per task at the training temperature.
    screen.main(["--attempts", "10"], runner=runner)
    screened = json.loads((bucket / "screening" / "screened-tasks.json").read_text())
    verdicts = {r["task_id"]: r for r in screened["per_task"]}
    assert verdicts["local-1"]["verdict"] == "drop: never solved" and verdicts["local-1"]["passed"] == 0
    repo_task = verdicts["local-0"]
    assert repo_task["scored"] == 10
    # Solved in about half the rollouts: all-same in 10 fair coins is a 0.2% event.
    assert repo_task["verdict"] == "keep", repo_task
    assert screened["keep"] == [{"split": "local", "index": 0, "task_id": "local-0"}]
    assert (
        "| local-1 | local | 0 / 10 | 0.0% | 0 | drop: never solved |"
        in (bucket / "screening" / "screening.md").read_text()
    )
    t_screen = time.monotonic() - t0 - t_baseline

    # 3. Train 2 steps on the screened tasks, evaluating at step 2, then publish.
    env = {
        **os.environ,
        **stack["env"],
        "SCRIPTED_AGENT_TASKS": json.dumps(TASKS),
        "SCREENED_TASKS": str(bucket / "screening" / "screened-tasks.json"),
        "EVAL_STEPS": "2",
        "BUCKET_NOT_A_MOUNT_OK": "i-accept-losing-checkpoints",
        "REQUIRED_GPUS": "0",
        "WEIGHT_TRANSFER": "mock",
        "SANDBOX": "docker",
        "TUNNEL_PROVIDER": "direct",
        "COMPOSE_PROFILES": "",
        "MIN_FREE_DISK_GB": "0",
        "RUN_NAME": RUN,
        "MAX_STEPS": "2",
        "NUM_GENERATIONS": "4",
        "PER_DEVICE_TRAIN_BATCH_SIZE": "4",
        "TOKEN_BUDGET": "0",
        "MAX_INFLIGHT_ROLLOUTS": "4",
        "SAVE_STEPS": "1",
        "LEARNING_RATE": "1e-2",
        "MAX_OUTPUT_TOKENS": "128",
        "AGENT_STEP_LIMIT": "3",
        "REPORT_TO": "tensorboard",
    }
    out = subprocess.run(
        [sys.executable, str(HERE / "run_trainer.py"), stack["runner"].capture_url],
        env=env,
        capture_output=True,
        text=True,
        timeout=540,
    )
    log = out.stdout + out.stderr
    (stack["work"] / "trainer.log").write_text(log)
    assert out.returncode == 0, log[log.find("Traceback") :][:5000] + "\n...\n" + log[-3000:]
    t_train = time.monotonic() - t0 - t_baseline - t_screen
    with capsys.disabled():
        print(f"\nbaseline eval {t_baseline:.0f}s, screening {t_screen:.0f}s, train+eval+publish {t_train:.0f}s")

    run_dir = bucket / "checkpoints" / RUN
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "finished" and status["step"] == 2
    # The periodic evaluation: at step 2 only, in status, on the bucket, on the dashboard.
    assert sorted(p.name for p in (run_dir / "evals").iterdir()) == ["step-2.json", "step-2.md"]
    step2 = json.loads((run_dir / "evals" / "step-2.json").read_text())
    assert step2["step"] == 2 and step2["label"] == "step 2" and step2["attempts"] == 4
    assert status["eval"]["step"] == 2 and status["eval"]["pass_at_1"] == step2["pass_at_k"]["1"]["value"]
    assert status["eval_baseline"]["label"] == "base tiny"
    # The learning curve (trainer/report/curve.py): the baseline as step 0's pass@1, the evaluation at step 2 in step
    # 2's row, and in checkpoint-2's log_history (which a resumed run rebuilds the curve from).
    from trainer.report import curve

    rows = curve.read_csv(run_dir / "curve.csv")
    p1 = step2["pass_at_k"]["1"]
    assert [r["step"] for r in rows] == [0, 1, 2], rows
    assert rows[0]["pass_at_1"] == status["eval_baseline"]["pass_at_1"] and rows[0]["reward_mean"] is None
    assert rows[1]["pass_at_1"] is None and rows[1]["mismatch_kl_mean"] is not None, rows
    assert (rows[2]["pass_at_1"], rows[2]["pass_at_1_ci_low"], rows[2]["pass_at_1_ci_high"]) == (
        p1["value"],
        p1["ci_low"],
        p1["ci_high"],
    )
    history = json.loads((run_dir / "checkpoint-2" / "trainer_state.json").read_text())["log_history"]
    assert [h.get("eval/pass@1") for h in history if h["step"] == 2][0] == p1["value"], history
    assert (run_dir / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with capsys.disabled():
        print(curve.table(rows))
    assert "eval: step 2 pass@1" in log
    events = list((bucket / "dashboards" / "tensorboard" / RUN).glob("events.out.tfevents.*"))
    assert events and any(b"eval/pass@1" in e.read_bytes() for e in events)
    # Trained on the screened task only.
    assert f"trainer: 1 training task(s) of 2 served (SCREENED_TASKS={bucket}/screening/screened-tasks.json)" in log

    # The Hub: the final model with its card, pushed by the real client to the stand-in.
    assert status["hub"]["state"] == "pushed" and status["hub"]["pushed"] == ["final"], status["hub"]
    repo = stack["work"] / "hub" / "me" / "tiny-harbor"
    files = sorted(p.name for p in repo.iterdir())
    assert {"README.md", "config.json", "model.safetensors"} <= set(files), files
    assert not {"optimizer.pt", "scheduler.pt", "training_args.bin"} & set(files)
    card = (repo / "README.md").read_text()
    assert card.startswith("---\nbase_model: ") and f"Run `{RUN}`, step 2." in card
    assert "| base tiny | local (trained on) | 2 | 4 / 4 |" in card and "| step 2 | local (trained on) | 2 |" in card
    assert "## Training reward" in card and "| trl | 1.16.0 |" in card and TOKEN not in card
    assert stack["hub"].created[-1] == {"name": "tiny-harbor", "organization": "me", "visibility": "private"}


def test_a_step_already_evaluated_is_not_evaluated_again(tmp_path):
    """A finished run started again under its RUN_NAME resumes at its last step and trains nothing, but the
    Trainer's closing log reaches PeriodicEval.on_log at that step. The report in the run's folder says the step was
    evaluated: no second evaluation (48 rollouts in the CPU learn form), and the report the run was judged on stays."""
    from types import SimpleNamespace

    from trainer.evaluation.eval_callback import PeriodicEval

    evals = tmp_path / "run" / "evals"
    evals.mkdir(parents=True)
    report = evals / "step-2.json"
    report.write_text('{"step": 2, "label": "step 2"}')

    class NoRunner:
        def __getattr__(self, name):
            raise AssertionError(f"step 2 evaluated again (runner.{name})")

    def status_update(**fields):
        raise AssertionError(f"step 2 evaluated again (status {fields})")

    settings = SimpleNamespace(run_dir=str(tmp_path / "run"), evaluation=SimpleNamespace(steps=2))
    cb = PeriodicEval(NoRunner(), rows=[], settings=settings, status=SimpleNamespace(update=status_update))
    logs = {"train_runtime": 1.0}
    cb.on_log(None, SimpleNamespace(global_step=2, max_steps=2), None, logs=logs)
    assert logs == {"train_runtime": 1.0}
    assert report.read_text() == '{"step": 2, "label": "step 2"}'
    # Steps without a report are still due: the schedule itself is unchanged.
    assert (cb.due(2, 4), cb.due(4, 4), cb.due(3, 5), cb.due(5, 5)) == (False, True, False, True)


def test_the_last_steps_evaluation_stops_the_rollout_worker_first(tmp_path, monkeypatch):
    """At the last step the rollout worker's groups would never train: it is stopped before the evaluation, so
    the evaluation's rollouts do not share sandboxes and the engine with them. At any other step it keeps sampling."""
    from types import SimpleNamespace

    from trainer.evaluation import eval_callback

    calls: list[str] = []

    class Worker:
        def stop(self):
            calls.append("worker stopped")

    def evaluate(runner, rows, s, label):
        calls.append(f"evaluated {label}")
        return {"tasks": 1, "attempts": 1, "unscorable": 0, "scored_attempts": 1, "pass_at_k": {}}

    monkeypatch.setattr(eval_callback, "evaluate", evaluate)
    monkeypatch.setattr(eval_callback, "write_report", lambda doc, folder, stem: None)
    settings = SimpleNamespace(run_dir=str(tmp_path / "run"), evaluation=SimpleNamespace(steps=2))
    cb = eval_callback.PeriodicEval(None, [], settings, SimpleNamespace(update=lambda **_: None), worker=Worker())
    cb.on_log(None, SimpleNamespace(global_step=2, max_steps=4), None, logs={})
    cb.on_log(None, SimpleNamespace(global_step=4, max_steps=4), None, logs={})
    assert calls == ["evaluated step 2", "worker stopped", "evaluated step 4"]
