"""The stack's own processes on two GPUs: real vLLM, OpenEnv's capture proxy, the project's trainer, NCCL sync.

    tests/gpu/run            (the runner sets up the environment and calls this)

GPU 0: `python -m engine` (the production launcher, every production flag) serving a Qwen3-1.7B-shaped model
with random weights built here (tests/gpu/build_model.py). In front of it: OpenEnv's capture app, the one the
env server serves. GPU 1: the project's trainer (tests/gpu/run_trainer.py: `trainer.train.run`, real TRL
AsyncGRPO, WEIGHT_TRANSFER=nccl, regional compile) fed by scripted agent rollouts through the capture proxy.

Asserts: the project's probe and OpenEnv's grade the engine `tokens`; the trainer syncs weights into vLLM
over NCCL after every step and the engine's logprobs change; one training row per rollout (no forking) with
multi-turn rollouts; the engine's logprobs on its own samples match the trained checkpoint's within bf16
tolerance; checkpoints written. Prints engine start time, generation tokens/s, step time, weight-sync
seconds and GPU memory of both sides; writes everything to $OUT/gpu-check.json.

Knobs (steps, rollouts per step, concurrent rollouts, resume) and folders: check_settings.py. Every run has
a fresh run name and folder unless GPU_CHECK_RESUME names an earlier run.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import check_settings
import httpx
from check_wait import NotReady, Readiness, command_check, tail, wait_until

from engine.probe import UNPROVEN_OK
from stack.env import EnvError

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
# bf16 on both sides (vLLM's kernels vs transformers' eager forward): per-token logprob differences of a few
# hundredths on average, tenths at worst, were measured for this shape (issue 15: 0.031 mean / 0.14 max).
LOGPROB_MEAN_TOL = 0.06
LOGPROB_MAX_TOL = 0.5
PROBE = [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": "List the files."}]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class GpuMemory:
    """Peak used MiB per GPU, sampled with nvidia-smi every second (both processes, whatever allocator)."""

    def __init__(self):
        self.peak: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def sample(self) -> dict[int, int]:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=index,memory.used", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
        now = {int(i): int(m) for i, m in (line.split(",") for line in out.strip().splitlines())}
        for i, m in now.items():
            self.peak[i] = max(self.peak.get(i, 0), m)
        return now

    def _loop(self):
        while not self._stop.wait(1.0):
            self.sample()

    def start(self):
        self._thread.start()

    def stop(self):
        self._stop.set()


def chat(base: str, body: dict, timeout: float = 120) -> dict:
    return httpx.post(base + "/v1/chat/completions", json=body, timeout=timeout).raise_for_status().json()


def first_token_logprobs(base: str, model: str) -> list:
    body = {"model": model, "messages": PROBE, "max_tokens": 1, "logprobs": True, "top_logprobs": 5, "temperature": 1.0}
    entries = chat(base, body)["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
    return sorted((e["token"], round(e["logprob"], 4)) for e in entries)


def throughput(base: str, model: str, concurrency: int, prompt_tokens: int = 1024, new_tokens: int = 256) -> float:
    """Generated tokens per second with `concurrency` requests in flight (character tokenizer: 1 char = 1 token)."""
    text = ("ls -la; cat README.md; grep -rn TODO src/ | head; " * 64)[:prompt_tokens]
    body = {
        "model": model,
        "messages": [{"role": "user", "content": text}],
        "max_tokens": new_tokens,
        "min_tokens": new_tokens,
        "ignore_eos": True,
        "temperature": 1.0,
    }
    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        t0 = time.monotonic()
        replies = list(pool.map(lambda _: chat(base, body, timeout=600), range(concurrency)))
        seconds = time.monotonic() - t0
    return sum(r["usage"]["completion_tokens"] for r in replies) / seconds


def engine_vs_checkpoint(base: str, model: str, checkpoint: Path, initial: Path) -> dict:
    """Per-token |engine logprob - transformers logprob| on the engine's own samples, against the trained
    checkpoint (what the engine must now hold) and against the initial weights (what it held before)."""
    import torch
    from transformers import AutoModelForCausalLM

    # GPU 1: the trainer has exited; GPU 0 is the engine's.
    samples = []
    for seed in range(4):
        body = {
            "model": model,
            "messages": PROBE,
            "max_tokens": 64,
            "temperature": 1.0,
            "logprobs": True,
            "return_token_ids": True,
            "seed": seed,
        }
        reply = chat(base, body)
        choice = reply["choices"][0]
        samples.append(
            (reply["prompt_token_ids"], choice["token_ids"], [e["logprob"] for e in choice["logprobs"]["content"]])
        )
    out = {}
    for name, path in (("trained", checkpoint), ("initial", initial)):
        hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).to("cuda:1").eval()
        diffs = []
        with torch.no_grad():
            for prompt, sampled, engine_lps in samples:
                ids = torch.tensor([prompt + sampled], device="cuda:1")
                logps = torch.log_softmax(hf(ids).logits[0].float(), -1)
                ours = logps[len(prompt) - 1 : -1].gather(-1, ids[0, len(prompt) :, None])[:, 0]
                diffs += (ours.cpu() - torch.tensor(engine_lps)).abs().tolist()
        out[name] = {"mean_abs": statistics.fmean(diffs), "max_abs": max(diffs), "tokens": len(diffs)}
        del hf
        torch.cuda.empty_cache()
    return out


def windows(log: str, key: str) -> list[float]:
    return [float(v) for v in re.findall(rf"'{re.escape(key)}': '?([0-9.e+-]+|nan)'?", log)]


def build_model(model: Path) -> None:
    """Once per version of build_model.py; built aside and renamed, so an interrupted build is never reused."""
    if (model / "gpu_check_model.json").is_file():
        return
    partial = model.with_name(model.name + ".partial")
    subprocess.run([sys.executable, str(HERE / "build_model.py"), str(partial)], check=True, timeout=600)
    partial.rename(model)


def main() -> int:
    try:
        knobs = check_settings.read(os.environ)
        layout = check_settings.plan(knobs, HERE / "build_model.py", out=os.environ.get("OUT", ""))
    except EnvError as exc:
        print(f"gpu-check: {exc}", file=sys.stderr)
        return 2
    run, out_dir, work = layout.run, layout.out, knobs.work_root
    print(
        f"gpu-check: run {run} ({'resumed at step ' + str(layout.start_step) if knobs.resume else 'fresh'}) in "
        f"{layout.run_dir}: {knobs.steps} steps, "
        f"{knobs.rollouts_per_step or f'token-budget ({knobs.token_budget}) packed'} rollouts per step, "
        f"{knobs.concurrent_rollouts} concurrent",
        flush=True,
    )
    figures: dict = {"versions": {}, "run": run, "knobs": {**knobs.__dict__, "work_root": str(knobs.work_root)}}
    import torch
    import transformers
    import trl
    import vllm

    figures["versions"] = {
        "vllm": vllm.__version__,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "trl": trl.__version__,
        "gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())],
        "nccl_env": {k: v for k, v in os.environ.items() if k.startswith("NCCL_") or k == "VLLM_HOST_IP"},
    }
    print(f"versions: {figures['versions']}", flush=True)
    assert torch.cuda.device_count() >= 2, "the check needs two GPUs (engine on 0, trainer on 1)"

    model = layout.model
    build_model(model)
    memory = GpuMemory()
    memory.start()
    engine_port, capture_port = free_port(), free_port()
    engine_url, capture_url = f"http://127.0.0.1:{engine_port}", f"http://127.0.0.1:{capture_port}"
    logs = {name: open(out_dir / f"{name}.log", "w") for name in ("engine", "proxy", "trainer")}
    services = os.pathsep.join([str(REPO / "services"), os.environ.get("PYTHONPATH", "")])
    base_env = {
        **os.environ,
        "PYTHONPATH": services,
        "HF_HOME": str(layout.run_dir / "hf-home"),
        "PYTHONUNBUFFERED": "1",
    }
    # The production probe grades this engine as it would any: no acceptance of an unmeasurable gap.
    base_env.pop(UNPROVEN_OK, None)
    t0 = time.monotonic()
    engine = subprocess.Popen(
        [sys.executable, "-m", "engine"],
        env={
            **base_env,
            "CUDA_VISIBLE_DEVICES": "0",
            "MODEL": str(model),
            "ENGINE_PORT": str(engine_port),
            "ENGINE_MAX_MODEL_LEN": "8192",
            "TOOL_CALL_PARSER": "hermes",
            "ENGINE_GPU_MEMORY_UTILIZATION": os.environ.get("ENGINE_GPU_MEMORY_UTILIZATION", "0.85"),
        },
        stdout=logs["engine"],
        stderr=subprocess.STDOUT,
    )
    procs = [engine]
    try:
        # TMPDIR: the probe remembers a model it proved in the temp folder; a run's own folder keeps an earlier
        # run's proof (same model path) from standing in for this engine's.
        (layout.run_dir / "tmp").mkdir(exist_ok=True)
        probe_env = {**base_env, "ENGINE_PORT": str(engine_port), "TMPDIR": str(layout.run_dir / "tmp")}
        healthy = command_check([sys.executable, "-m", "engine.probe"], probe_env)
        start_s = wait_until(healthy, engine, "engine", knobs.engine_timeout_s, log=out_dir / "engine.log")
        figures["engine_start_s"] = round(start_s, 1)
        verdict = healthy.said
        print(f"engine up in {figures['engine_start_s']} s: {verdict}", flush=True)
        figures["engine_probe"] = verdict
        from openenv.core.harness.capture.validate_llm import validate_llm

        report = validate_llm(engine_url + "/v1", model=str(model))
        figures["openenv_capture_level"] = report.capture_level
        print(f"OpenEnv validate_llm: capture_level={report.capture_level} findings={report.findings}", flush=True)
        assert report.capture_level == "tokens", report

        proxy = subprocess.Popen(
            [
                sys.executable,
                str(REPO / "tests/integration/trainer/capture_proxy.py"),
                engine_url + "/v1",
                str(model),
                str(capture_port),
                "vllm",
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

        figures["generation_tok_s"] = {}
        for n in (1, 16, 64):
            figures["generation_tok_s"][n] = round(throughput(engine_url, str(model), n))
            print(f"generation: {figures['generation_tok_s'][n]} tok/s at {n} concurrent", flush=True)
        figures["gpu_mib_engine_idle"] = memory.sample()

        before = first_token_logprobs(engine_url, str(model))
        bucket = layout.bucket
        trainer_env = {
            **base_env,
            "CUDA_VISIBLE_DEVICES": "1",
            "MODEL": str(model),
            "ENGINE_URL": engine_url,
            "BUCKET_DIR": str(bucket),
            "HF_HOME": str(bucket / "hf-home"),
            "BUCKET_NOT_A_MOUNT_OK": "i-accept-losing-checkpoints",
            "REQUIRED_GPUS": "2",
            "WEIGHT_TRANSFER": "nccl",
            "SANDBOX": "docker",
            "TUNNEL_PROVIDER": "direct",
            "COMPOSE_PROFILES": "",
            "DATASETS": "local",
            "MIN_FREE_DISK_GB": "0",
            "NUM_GENERATIONS": "4",
            "SAVE_STEPS": "1",
            # bf16 weights and AdamW state: an update far under a bf16 ulp is rounded away, so 1e-6 (the default)
            # would leave the engine's logprobs unchanged. 5e-4 collapsed the random model to one token by step 2
            # (every sampled logprob 0.0, which the trainer then masks as zero-filled): 2e-5 sits between.
            "LEARNING_RATE": "2e-5",
            "MAX_OUTPUT_TOKENS": "128",
            "AGENT_STEP_LIMIT": "3",
            "ENGINE_MAX_MODEL_LEN": "8192",
            "REPORT_TO": "tensorboard",
            # A compile cache, shared by the runs on one machine (it holds no run state).
            "TORCHINDUCTOR_CACHE_DIR": str(work / "inductor"),
            **check_settings.trainer_env(knobs, run),
        }
        t_train = time.monotonic()
        try:
            trainer = subprocess.run(
                [sys.executable, str(HERE / "run_trainer.py"), capture_url],
                env=trainer_env,
                stdout=logs["trainer"],
                stderr=subprocess.STDOUT,
                timeout=knobs.train_timeout_s,
            )
        except subprocess.TimeoutExpired:
            raise NotReady(
                f"the trainer did not finish within GPU_CHECK_TRAIN_TIMEOUT_S={knobs.train_timeout_s} s; last "
                f"lines of {out_dir / 'trainer.log'}:\n{tail(out_dir / 'trainer.log')}"
            ) from None
        figures["trainer_wall_s"] = round(time.monotonic() - t_train, 1)
        logs["trainer"].flush()
        log = (out_dir / "trainer.log").read_text()
        assert trainer.returncode == 0, log[log.find("Traceback") :][:6000] if "Traceback" in log else log[-6000:]
        after = first_token_logprobs(engine_url, str(model))

        run_dir = bucket / "checkpoints" / run
        status = json.loads((run_dir / "status.json").read_text())
        figures["status"] = status
        checkpoints = sorted(p.name for p in run_dir.glob("checkpoint-*"))
        figures["checkpoints"] = checkpoints
        figures["memory_report"] = [line for line in log.splitlines() if line.startswith(("trainer memory", "WARNING"))]
        for key in (
            "perf/step_s",
            "perf/fwd_bwd_s",
            "perf/weight_sync_s",
            "perf/weight_sync_transfer_s",
            "perf/rollout_wait_s",
            "ratio",
            "kl",
            "rollout/samples_per_rollout",
            "rollout/turns_max",
            "rollout/turns_mean",
            "harbor/forked_rollout_frac",
            "batch/samples_per_step",
            "batch/forwarded_tokens_per_step",
        ):
            figures[key] = windows(log, key)
        figures["engine_logprobs_before"], figures["engine_logprobs_after"] = before, after
        figures["logprob_match"] = engine_vs_checkpoint(engine_url, str(model), run_dir / checkpoints[-1], model)
        figures["gpu_peak_mib"] = dict(memory.peak)
        figures["total_s"] = round(time.monotonic() - t0, 1)
        (out_dir / "gpu-check.json").write_text(json.dumps(figures, indent=1, default=str))

        # --- the assertions -------------------------------------------------------------------------------
        steps, trained = knobs.steps, knobs.steps - layout.start_step
        assert status["state"] == "finished" and status["step"] == steps, status
        assert f"checkpoint-{steps}" in checkpoints, checkpoints
        assert (run_dir / f"checkpoint-{steps}" / "model.safetensors").is_file() or list(
            (run_dir / f"checkpoint-{steps}").glob("model*.safetensors")
        ), "no model weights in the last checkpoint"
        syncs = figures["perf/weight_sync_s"]
        assert len(syncs) >= trained, f"{len(syncs)} weight syncs logged for {trained} steps: {syncs}"
        assert after != before, f"the engine's logprobs did not change after {trained} synced steps: {before}"
        assert figures["rollout/samples_per_rollout"] and set(figures["rollout/samples_per_rollout"]) == {1.0}, figures[
            "rollout/samples_per_rollout"
        ]
        assert set(figures["harbor/forked_rollout_frac"]) == {0.0}, figures["harbor/forked_rollout_frac"]
        assert max(figures["rollout/turns_max"]) > 1, "no multi-turn rollout: chaining was not exercised"
        match = figures["logprob_match"]["trained"]
        assert match["mean_abs"] <= LOGPROB_MEAN_TOL and match["max_abs"] <= LOGPROB_MAX_TOL, figures["logprob_match"]
        assert any(line.startswith("trainer memory") for line in figures["memory_report"]), "no startup memory report"
    finally:
        memory.stop()
        for proc in reversed(procs):
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        for f in logs.values():
            f.close()
        (out_dir / "gpu-check.json").write_text(json.dumps(figures, indent=1, default=str))
    print_summary(figures)
    print(f"GPU CHECK PASSED (run {run}; train on with GPU_CHECK_RESUME={run} GPU_CHECK_STEPS=N)", flush=True)
    return 0


def print_summary(f: dict) -> None:
    def last(key):
        return f.get(key) or ["-"]

    m = f["logprob_match"]
    print(
        "\n| figure | value |\n|---|---|\n"
        f"| engine start (launcher to probe-healthy) | {f['engine_start_s']} s |\n"
        f"| generation tok/s at 1 / 16 / 64 concurrent | {' / '.join(str(v) for v in f['generation_tok_s'].values())} |\n"
        f"| step time (perf/step_s per step) | {last('perf/step_s')} |\n"
        f"| fwd+bwd (perf/fwd_bwd_s) | {last('perf/fwd_bwd_s')} |\n"
        f"| weight sync (perf/weight_sync_s) | {last('perf/weight_sync_s')} |\n"
        f"| of which NCCL transfer | {last('perf/weight_sync_transfer_s')} |\n"
        f"| TRL ratio / kl per step | {last('ratio')} / {last('kl')} |\n"
        f"| samples per rollout / forked frac / turns max | {last('rollout/samples_per_rollout')} / "
        f"{last('harbor/forked_rollout_frac')} / {last('rollout/turns_max')} |\n"
        f"| engine vs trained checkpoint, per-token |dlogprob| | mean {m['trained']['mean_abs']:.4f}, "
        f"max {m['trained']['max_abs']:.4f} over {m['trained']['tokens']} tokens |\n"
        f"| engine vs initial weights (for scale) | mean {m['initial']['mean_abs']:.4f}, max {m['initial']['max_abs']:.4f} |\n"
        f"| GPU peak MiB (nvidia-smi) | {f['gpu_peak_mib']} |\n"
        f"| checkpoints | {f['checkpoints']} |\n",
        flush=True,
    )


if __name__ == "__main__":
    sys.exit(main())
