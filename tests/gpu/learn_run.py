"""Learning on real vLLM on one GPU: the pick-answer policy served by `python -m engine`, trained through OpenEnv's
capture proxy by the project's trainer with WEIGHT_TRANSFER=ipc pushes, rollouts by mini-swe-agent (tests/gpu/LEARN.md).

    tests/gpu/learn                         the learning run: must show held-out pass@1 rising (exit 0 when it does)
    LEARN_CONTROL=1 tests/gpu/learn         the control, pushes skipped: must FAIL the same assertion (exit 0 when it does)
    LEARN_ENGINE=mock tests/gpu/learn       the same orchestration on the CPU mock engine (WEIGHT_TRANSFER=mock): a dry run

In order: build the policy here (learn_policy.py), start the engine and wait for the production probe, start the
capture proxy, evaluate the held-out split on the base weights (trainer.evaluation.evaluate), train (trainer.train.run, its
own evaluation at the last step), then the verdict (learn_verdict.py). Writes $OUT/learn.json and prints the table.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import secrets
import subprocess
import sys
import time
from pathlib import Path

import check_usage
import httpx
from check_stack import free_port
from check_wait import NotReady, Readiness, command_check, tail, wait_until
from learn_verdict import gate_failures, log_history, table

from stack.env import Env, EnvError
from stack.serving.probe import UNPROVEN_OK

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
TRAIN = REPO / "datasets/pick-answer/train"
HELDOUT = REPO / "datasets/pick-answer/heldout"
# build_policy measured on the CPU: format entropy mean 2.9e-3, max 3.6e-2 nats; letter mass ~1. A policy past these
# would spend the run on broken actions, so it stops before the engine starts.
MAX_FORMAT_ENTROPY = 0.2
MIN_LETTER_MASS = 0.9


def knobs(env) -> dict:
    r = Env(env, collect=True)
    k = {
        "engine": r.text("LEARN_ENGINE", "vllm"),
        "control": r.text("LEARN_CONTROL", "0") == "1",
        "steps": r.integer("LEARN_STEPS", 15, minimum=1),
        "group": r.integer("LEARN_GROUP", 8, minimum=2),
        "rollouts_per_step": r.integer("LEARN_ROLLOUTS_PER_STEP", 16, minimum=2),
        "concurrency": r.integer("LEARN_CONCURRENCY", 16, minimum=1),
        "eval_attempts": r.integer("LEARN_EVAL_ATTEMPTS", 4, minimum=1),
        "lr": r.text("LEARN_LR", "3e-4"),
        "work": Path(r.text("LEARN_WORK", "/tmp/gpu-learn")),
        "policy_steps": r.text("LEARN_POLICY_STEPS", ""),
        "engine_timeout_s": r.integer("LEARN_ENGINE_TIMEOUT_S", 240, minimum=1),
        "train_timeout_s": r.integer("LEARN_TRAIN_TIMEOUT_S", 360, minimum=1),
    }
    r.check()
    if k["engine"] not in ("vllm", "mock"):
        raise EnvError(f"LEARN_ENGINE={k['engine']!r}: set vllm (the GPU run) or mock (the CPU dry run)")
    if k["rollouts_per_step"] % k["group"]:
        raise EnvError(
            f"LEARN_ROLLOUTS_PER_STEP={k['rollouts_per_step']} is not a multiple of LEARN_GROUP={k['group']}"
        )
    return k


def build_policy(k: dict, out_dir: Path) -> Path:
    """Once per version of the policy's code, this host's uname and the step counts; built aside and renamed."""
    key = hashlib.sha256()
    for f in ("services/mock_engine/build_policy.py", "services/mock_engine/agent_turns.py"):
        key.update((REPO / f).read_bytes())
    key.update(repr((tuple(platform.uname()), k["policy_steps"])).encode())
    model = k["work"] / "models" / f"pick-policy-{key.hexdigest()[:12]}"
    if not (model / "mock_engine.json").is_file():
        partial = model.with_name(model.name + ".partial")
        steps = k["policy_steps"].split(",") if k["policy_steps"] else []
        with open(out_dir / "policy.log", "w") as log:
            subprocess.run(
                [sys.executable, str(HERE / "learn_policy.py"), str(partial), str(TRAIN), *steps],
                check=True,
                stdout=log,
                stderr=subprocess.STDOUT,
                timeout=600,
            )
        partial.rename(model)
    meta = json.loads((model / "mock_engine.json").read_text())
    if not k["policy_steps"] and (
        meta["format_entropy_max"] > MAX_FORMAT_ENTROPY or meta["letter_mass"] < MIN_LETTER_MASS
    ):
        raise NotReady(
            f"the policy built at {model} is not sure of its action format (format entropy max "
            f"{meta['format_entropy_max']:.3g} > {MAX_FORMAT_ENTROPY} or letter mass {meta['letter_mass']:.3g} < "
            f"{MIN_LETTER_MASS}): see {out_dir / 'policy.log'}"
        )
    return model


def main() -> int:
    try:
        k = knobs(os.environ)
    except EnvError as exc:
        print(f"learn: {exc}", file=sys.stderr)
        return 2
    gpu = k["engine"] == "vllm"
    kind = "control" if k["control"] else "learning"
    run = f"learn-{kind}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{secrets.token_hex(3)}"
    run_dir = k["work"] / "runs" / run
    bucket = run_dir / "bucket"
    out_dir = Path(os.environ["OUT"]) if os.environ.get("OUT") else run_dir / "out"
    for d in (bucket, out_dir, run_dir / "tmp"):
        d.mkdir(parents=True, exist_ok=True)
    transfer = "ipc" if gpu else "mock"
    figures: dict = {"run": run, "kind": kind, "engine": k["engine"], "weight_transfer": transfer, "timings_s": {}}
    figures["knobs"] = {n: str(v) for n, v in k.items()}
    print(f"learn: {kind} run {run} in {run_dir}: {k['steps']} steps x {k['rollouts_per_step']} rollouts", flush=True)
    t0 = time.monotonic()

    def mark(name: str, since: float) -> float:
        figures["timings_s"][name] = round(time.monotonic() - since, 1)
        print(f"learn: {name} {figures['timings_s'][name]} s", flush=True)
        return time.monotonic()

    memory = None
    procs: list[subprocess.Popen] = []
    logs = {n: open(out_dir / f"{n}.log", "w") for n in ("engine", "proxy", "baseline", "trainer")}
    try:
        model = build_policy(k, out_dir)
        figures["policy"] = json.loads((model / "mock_engine.json").read_text())
        t = mark("policy build", t0)
        if gpu:
            # The GPU check's sampler (NVML, nvidia-smi without it): per-GPU peak and busy fraction every second.
            memory, _source = check_usage.start(lambda: {})
        engine_port, capture_port = free_port(), free_port()
        engine_url, capture_url = f"http://127.0.0.1:{engine_port}", f"http://127.0.0.1:{capture_port}"
        base_env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(REPO / "services"), os.environ.get("PYTHONPATH", "")]),
            "HF_HOME": str(run_dir / "hf-home"),
            "PYTHONUNBUFFERED": "1",
            "MODEL": str(model),
            "ENGINE_PORT": str(engine_port),
            "ENGINE_MAX_MODEL_LEN": "8192",
        }
        if not k["policy_steps"]:
            # The production probe grades this engine as any other. A shortened fit (LEARN_POLICY_STEPS, a dry run of
            # the plumbing) leaves the policy nearly flat (20+4 steps: top-two gap 0.254 < 0.5), so there the
            # operator's own ENGINE_LOGPROBS_UNPROVEN_OK is let through.
            base_env.pop(UNPROVEN_OK, None)
        if gpu:
            engine_env = {
                **base_env,
                "CUDA_VISIBLE_DEVICES": "0",
                "TOOL_CALL_PARSER": "hermes",
                "WEIGHT_TRANSFER": transfer,
                "ENGINE_GPU_MEMORY_UTILIZATION": os.environ.get("ENGINE_GPU_MEMORY_UTILIZATION", "0.3"),
            }
            argv = [sys.executable, "-m", "engine"]
        else:
            engine_env = {**base_env, "MOCK_MODEL_DIR": str(model), "MOCK_SCRIPT_FILE": "", "MOCK_SCRIPT_PROB": "0"}
            argv = [sys.executable, "-m", "mock_engine"]
        engine = subprocess.Popen(argv, env=engine_env, stdout=logs["engine"], stderr=subprocess.STDOUT)
        procs.append(engine)
        probe_env = {**base_env, "TMPDIR": str(run_dir / "tmp")}
        healthy = command_check([sys.executable, "-m", "engine.probe"], probe_env)
        wait_until(healthy, engine, "engine", k["engine_timeout_s"], log=out_dir / "engine.log")
        figures["engine_probe"] = healthy.said
        t = mark("engine start (to probe-healthy)", t)
        proxy = subprocess.Popen(
            [
                sys.executable,
                str(REPO / "tests/integration/trainer/capture_proxy.py"),
                engine_url + "/v1",
                str(model),
                str(capture_port),
                k["engine"],
            ],
            env=base_env,
            stdout=logs["proxy"],
            stderr=subprocess.STDOUT,
        )
        procs.append(proxy)

        def proxy_health() -> tuple[bool, str]:
            reply = httpx.get(capture_url + "/health", timeout=5)
            return reply.status_code == 200, f"/health answered HTTP {reply.status_code}"

        wait_until(Readiness(proxy_health), proxy, "proxy", 60, log=out_dir / "proxy.log")
        trainer_env = {
            **base_env,
            "CUDA_VISIBLE_DEVICES": "0" if gpu else "",
            "ENGINE_URL": engine_url,
            "BUCKET_DIR": str(bucket),
            "HF_HOME": str(bucket / "hf-home"),
            "BUCKET_NOT_A_MOUNT_OK": "i-accept-losing-checkpoints",
            "REQUIRED_GPUS": "1" if gpu else "0",
            "WEIGHT_TRANSFER": transfer,
            "SANDBOX": "docker",
            "TUNNEL_PROVIDER": "direct",
            "COMPOSE_PROFILES": "",
            "DATASETS": str(TRAIN),
            "EVAL_DATASETS": str(HELDOUT),
            "MIN_FREE_DISK_GB": "0",
            "RUN_NAME": run,
            "MAX_STEPS": str(k["steps"]),
            "NUM_GENERATIONS": str(k["group"]),
            # TRL's fixed-count micro-batch: this many rollouts (whole groups) per optimizer step.
            "TOKEN_BUDGET": "0",
            "PER_DEVICE_TRAIN_BATCH_SIZE": str(k["rollouts_per_step"]),
            "MAX_INFLIGHT_ROLLOUTS": str(k["concurrency"]),
            "AGENT_STEP_LIMIT": "2",
            "AGENT_TIMEOUT_S": "120",
            "LEARNING_RATE": k["lr"],
            "SAVE_STEPS": str(k["steps"]),
            "SAVE_TOTAL_LIMIT": "1",
            "EVAL_STEPS": str(k["steps"]),
            "EVAL_ATTEMPTS": str(k["eval_attempts"]),
            "EVAL_TEMPERATURE": "1.0",
            "EVAL_CONCURRENCY": str(k["concurrency"]),
            # Format-error retries fork by design in this family (compose.learn.yaml says why).
            "STOP_FORKING_FRAC": "off",
            "TRAINER_COMPILE_LAYERS": "0",  # a 2-layer model: compiling costs more than it saves
            "REPORT_TO": "tensorboard",
            "TORCHINDUCTOR_CACHE_DIR": str(k["work"] / "inductor"),
            "LEARN_CAPTURE_URL": capture_url,
            "LEARN_TRAIN_SPLIT": str(TRAIN),
            "LEARN_HELDOUT_SPLIT": str(HELDOUT),
            "LEARN_ROLLOUTS_DIR": str(run_dir / "rollouts"),
        }
        if k["control"]:
            # As the CPU gate's control: unserved weights make the mismatch climb, and the rule could stop the run
            # before the evaluation whose assertion the control has to fail.
            trainer_env |= {"LEARN_CONTROL": "1", "STOP_MISMATCH_KL": "off"}
        baseline = subprocess.run(
            [sys.executable, str(HERE / "learn_trainer.py"), "evaluate", "baseline", "base"],
            env=trainer_env,
            stdout=logs["baseline"],
            stderr=subprocess.STDOUT,
            timeout=300,
        )
        logs["baseline"].flush()
        if baseline.returncode != 0:
            raise NotReady(
                f"the baseline evaluation failed; last lines of {out_dir / 'baseline.log'}:\n{tail(out_dir / 'baseline.log')}"
            )
        base_doc = json.loads((bucket / "evals" / "baseline" / "eval.json").read_text())
        t = mark("baseline evaluation", t)
        try:
            trainer = subprocess.run(
                [sys.executable, str(HERE / "learn_trainer.py"), "train"],
                env=trainer_env,
                stdout=logs["trainer"],
                stderr=subprocess.STDOUT,
                timeout=k["train_timeout_s"],
            )
        except subprocess.TimeoutExpired:
            raise NotReady(
                f"the trainer did not finish within LEARN_TRAIN_TIMEOUT_S={k['train_timeout_s']} s; last lines of "
                f"{out_dir / 'trainer.log'}:\n{tail(out_dir / 'trainer.log')}"
            ) from None
        logs["trainer"].flush()
        if trainer.returncode != 0:
            raise NotReady(
                f"the trainer exited {trainer.returncode}; last lines of {out_dir / 'trainer.log'}:\n{tail(out_dir / 'trainer.log')}"
            )
        t = mark("training with the final evaluation", t)
        ckpts = bucket / "checkpoints" / run
        final_doc = json.loads((ckpts / "evals" / f"step-{k['steps']}.json").read_text())
        history = log_history(ckpts)
        failures = gate_failures(
            base_doc, final_doc, min_scored=len(base_doc["per_task"]) * k["eval_attempts"] * 9 // 10
        )
        figures |= {
            "failures": failures,
            "baseline": base_doc["pass_at_k"],
            "final": final_doc["pass_at_k"],
            "log_history": history,
            "status": json.loads((ckpts / "status.json").read_text()),
        }
        if memory:
            figures["gpu_peak_mib"] = dict(memory.peak_gpu)
            figures["gpu_busy_pct_mean"] = memory.busy_mean()
        figures["timings_s"]["total"] = round(time.monotonic() - t0, 1)
        print("\n" + table(figures, base_doc, final_doc, history) + "\n", flush=True)
    finally:
        if memory:
            memory.stop()
        for proc in reversed(procs):
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        for f in logs.values():
            f.close()
        (out_dir / "learn.json").write_text(json.dumps(figures, indent=1, default=str))
    learned = not failures
    if k["control"]:
        print(
            f"LEARN CONTROL {'DID NOT FAIL THE GATE: the gate proves nothing' if learned else 'FAILED THE GATE, AS IT MUST'} (run {run})"
        )
        return 1 if learned else 0
    print(f"LEARN {'PASSED' if learned else 'FAILED: ' + '; '.join(failures)} (run {run})")
    return 0 if learned else 1


if __name__ == "__main__":
    sys.exit(main())
