"""The stack's own processes on the lent GPU machine: real vLLM, OpenEnv's capture proxy, the project's trainer.

    tests/gpu/run            (the runner sets up the environment and calls this)

Two forms (check_form.py; GPU_CHECK_FORM=auto picks by the GPUs seen):
- two-GPU: `python -m engine` (the production launcher, every production flag) on GPU 0, the project's trainer
  on GPU 1, weights synced over NCCL (WEIGHT_TRANSFER=nccl, TRL's own client);
- one-GPU: both on GPU 0, weights pushed through vLLM's CUDA-IPC transfer (WEIGHT_TRANSFER=ipc), the engine at a
  small memory share so the trainer fits beside it.
Either way: a Qwen3-1.7B-shaped model with random weights built here (tests/gpu/build_model.py), OpenEnv's capture
app in front of the engine (the one the env server serves), the trainer (tests/gpu/run_trainer.py:
`trainer.train.run`, real TRL AsyncGRPO, float32 master weights with bfloat16 autocast, regional compile) fed by
scripted agent rollouts through the capture proxy.

Asserts: the project's probe and OpenEnv's grade the engine `tokens`; the trainer runs the production dtype path
and pushes weights after every step by the form's transfer, and the engine's logprobs change; one training row per
rollout (no forking) with multi-turn rollouts; the engine's logprobs on its own samples match the trained
checkpoint's within bf16 tolerance; checkpoints written. Records engine start, the probe's verdict, generation
tokens/s, step time, seconds per push, each process's peak GPU memory and the GPU's busy fraction sampled every
second (check_usage.py), all labelled with the form, in $OUT/gpu-check.json (rewritten after every phase, so a
killed run leaves what it had) and a printed table. A failure ends in one line naming the phase and the cause.

Knobs (form, steps, rollouts per step, concurrent rollouts, resume, limits) and folders: check_settings.py. Every
run has a fresh run name and folder unless GPU_CHECK_RESUME names an earlier run.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

import check_form
import check_settings
import check_usage
import httpx
from check_wait import Budget, NotReady, Readiness, command_check, run_until, wait_until

from stack.env import EnvError
from stack.serving.probe import UNPROVEN_OK
from stack.sizing import precision

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
# bf16 on both sides (vLLM's kernels vs transformers' eager forward): per-token logprob differences of a few
# hundredths on average, tenths at worst, were measured for this shape (issue 15: 0.031 mean / 0.14 max).
LOGPROB_MEAN_TOL = 0.06
LOGPROB_MAX_TOL = 0.5
PROBE = [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": "List the files."}]
# What the trainer runs in production on a GPU (stack/sizing/precision.py): float32 weights and AdamW state, the forward
# and backward under bfloat16 autocast. Not the CPU form's all-float32.
PRODUCTION = precision.Precision(weights="float32", compute="bfloat16")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


def engine_vs_checkpoint(base: str, model: str, checkpoint: Path, initial: Path, device: str) -> dict:
    """Per-token |engine logprob - transformers logprob| on the engine's own samples, against the trained
    checkpoint (what the engine must now hold) and against the initial weights (what it held before).
    `device`: the trainer's GPU, free now that it has exited (in one-GPU form the engine's, beside it)."""
    import torch
    from transformers import AutoModelForCausalLM

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
        hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).to(device).eval()
        diffs = []
        with torch.no_grad():
            for prompt, sampled, engine_lps in samples:
                ids = torch.tensor([prompt + sampled], device=device)
                logps = torch.log_softmax(hf(ids).logits[0].float(), -1)
                ours = logps[len(prompt) - 1 : -1].gather(-1, ids[0, len(prompt) :, None])[:, 0]
                diffs += (ours.cpu() - torch.tensor(engine_lps)).abs().tolist()
        out[name] = {"mean_abs": statistics.fmean(diffs), "max_abs": max(diffs), "tokens": len(diffs)}
        del hf
        torch.cuda.empty_cache()
    return out


def windows(log: str, key: str) -> list[float]:
    return [float(v) for v in re.findall(rf"'{re.escape(key)}': '?([0-9.e+-]+|nan)'?", log)]


def line_after(log: str, prefix: str) -> str | None:
    """The rest of the first log line that starts with `prefix`, or None."""
    for line in log.splitlines():
        if line.startswith(prefix):
            return line[len(prefix) :].strip()
    return None


def trainer_said(log: str) -> dict:
    """What the trainer's own lines say about the path it ran (trainer/train.py, tests/gpu/run_trainer.py)."""
    run_line = line_after(log, "trainer: run ") or ""
    transfer = re.search(r"weight transfer (\S+)", run_line)
    dtype = re.search(r"^trainer: (.+) at learning rate ", log, re.MULTILINE)
    peak = re.search(r"^trainer torch peak: reserved (\d+) MiB, allocated (\d+) MiB", log, re.MULTILINE)
    return {
        "trainer_weight_transfer": transfer.group(1) if transfer else None,
        "trainer_precision": dtype.group(1) if dtype else None,
        "trainer_attention_kernel": line_after(log, "trainer attention kernel:"),
        "trainer_first_sync": line_after(log, "trainer: first weight sync done:"),
        "trainer_torch_peak_mib": {"reserved": int(peak.group(1)), "allocated": int(peak.group(2))} if peak else None,
    }


def build_model(model: Path, timeout_s: float) -> None:
    """Once per version of build_model.py; built aside and renamed, so an interrupted build is never reused."""
    if (model / "gpu_check_model.json").is_file():
        return
    partial = model.with_name(model.name + ".partial")
    try:
        subprocess.run([sys.executable, str(HERE / "build_model.py"), str(partial)], check=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise NotReady(f"building the model did not finish within {timeout_s:.0f} s (the time left)") from None
    except subprocess.CalledProcessError as exc:
        raise NotReady(f"building the model failed (exit {exc.returncode}; its output is above)") from None
    partial.rename(model)


# --- before anything starts on the GPU -------------------------------------------------------------------------


def precision_problem(form: check_form.Form, dtype: str) -> str | None:
    """The trainer chooses its dtype path from WEIGHT_TRANSFER (stack/sizing/precision.py `choose`): the form's must be
    the production one, not the CPU form's all-float32."""
    try:
        chosen = precision.choose(form.weight_transfer, dtype)
    except ValueError as exc:
        return f"gpu-check: {exc}"
    if chosen == PRODUCTION:
        return None
    return (
        f"gpu-check: {form.name} form: the trainer would run {chosen.describe()} with WEIGHT_TRANSFER="
        f"{form.weight_transfer}, not the production path ({PRODUCTION.describe()}): stack/sizing/precision.py "
        f"`choose` must give WEIGHT_TRANSFER={form.weight_transfer} bfloat16 autocast as it gives nccl"
    )


def trainer_problems(form: check_form.Form, trainer_env: dict) -> list[str]:
    """The trainer's own guards on its settings and on its transfer backend's module, as it will run them."""
    from guards.checks import Probes, Settings, check_trainer_settings, check_weight_transfer

    settings, probes, lines = Settings(trainer_env), Probes(), []
    for check in (check_trainer_settings, check_weight_transfer):
        said = check(settings, probes)
        for line in [said] if isinstance(said, str) else said or []:
            lines.append(f"gpu-check: {form.name} form: the trainer would refuse to start: {line}")
    return lines


def launcher_problem(form: check_form.Form, engine_env: dict) -> str | None:
    """The production launcher's argv for the form's engine must name the form's transfer backend."""
    from engine.command import build_command

    try:
        argv = build_command(engine_env)
    except EnvError as exc:
        return f"gpu-check: {form.name} form: the engine launcher refuses its settings: {exc}"
    backend = check_form.launcher_backend(argv)
    if backend == form.weight_transfer:
        return None
    return (
        f"gpu-check: {form.name} form: the launcher starts vLLM with --weight-transfer-config backend {backend!r}, "
        f"not {form.weight_transfer!r}: services/engine/command.py must take the backend from WEIGHT_TRANSFER"
    )


def preflight(form: check_form.Form, engine_env: dict, trainer_env: dict) -> list[str]:
    """What would make this form's run fail after the engine's two-minute start, found in seconds: the trainer's
    dtype path, the trainer's settings and transfer backend, and the launcher's weight-transfer flag. One line
    each."""
    lines = [precision_problem(form, trainer_env.get("TRAIN_DTYPE", "float32"))]
    lines += trainer_problems(form, trainer_env)
    lines.append(launcher_problem(form, engine_env))
    return [line for line in lines if line]


def ipc_engine_problem(env: dict) -> str | None:
    """vLLM's ipc engine, imported as the engine will import it (vllm 0.25.1's ipc_engine.py imports ray at module
    top, and the GPU image has no ray), in seconds rather than after the engine's start."""
    module = "vllm.distributed.weight_transfer.ipc_engine"
    done = subprocess.run(
        [sys.executable, "-c", f"import {module}"], env=env, capture_output=True, text=True, timeout=300
    )
    if done.returncode == 0:
        return None
    last = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
    fix = (
        "carry ray with the check's packages (tests/gpu/carry-requirements.txt)"
        if "No module named 'ray'" in last
        else "see the error; the engine imports this module for --weight-transfer-config backend ipc"
    )
    return f"gpu-check: one-GPU form: {module} does not import ({last}): {fix}"


# --- the run ---------------------------------------------------------------------------------------------------


class Phases:
    """Named spans of the run on the sampler's clock, so the GPU's busy fraction can be read per phase; the current
    one names where a failure happened. Each phase's end rewrites gpu-check.json."""

    def __init__(self, clock, on_end):
        self.clock, self.on_end = clock, on_end
        self.spans: dict[str, tuple[float, float]] = {}
        self.current = "setup"

    @contextlib.contextmanager
    def __call__(self, name: str):
        self.current, start = name, self.clock()
        try:
            yield
        finally:
            self.spans[name] = (start, self.clock())
            self.on_end()


def main() -> int:
    try:
        knobs = check_settings.read(os.environ)
        layout = check_settings.plan(knobs, HERE / "build_model.py", out=os.environ.get("OUT", ""))
        from guards.checks import count_gpus

        gpus, how = count_gpus()
        form = check_form.choose(knobs.form, gpus, how, os.environ)
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
    print(f"gpu-check: {form.label}; {gpus} GPU(s) seen by {how}, {check_form.KNOB}={knobs.form}", flush=True)
    figures: dict = {
        "form": form.name,
        "form_detail": form.label,
        "versions": {},
        "run": run,
        "knobs": {**knobs.__dict__, "work_root": str(knobs.work_root)},
    }
    json_path = out_dir / "gpu-check.json"
    roots: dict[int, str] = {os.getpid(): "check (this process: the transformers comparison)"}
    usage, usage_source = check_usage.start(lambda: roots)

    def save() -> None:
        figures["gpu_usage"] = usage.summary(phases.spans, usage_source)
        figures["gpu_peak_mib"] = figures["gpu_usage"]["gpu_peak_mib"]
        figures["phases_s"] = {name: list(span) for name, span in phases.spans.items()}
        json_path.write_text(json.dumps(figures, indent=1, default=str))

    phases = Phases(usage.now, save)
    budget = Budget(knobs.total_timeout_s)
    procs: list[subprocess.Popen] = []
    logs = {name: open(out_dir / f"{name}.log", "w") for name in ("engine", "proxy", "trainer")}
    failure = ""
    try:
        checked(form, knobs, layout, figures, usage, phases, budget, procs, logs, roots, work)
    except NotReady as exc:
        failure = str(exc)
    except AssertionError as exc:
        failure = f"assertion failed: {exc}"
    except Exception as exc:  # noqa: BLE001 -- anything else is still a failed phase, said as one
        traceback.print_exc()
        failure = f"{type(exc).__name__}: {exc}"
    finally:
        usage.stop()
        for proc in reversed(procs):
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        for f in logs.values():
            f.close()
        if failure:
            figures["failed"] = {"phase": phases.current, "why": failure.splitlines()[0], "detail": failure}
        save()
    print_summary(figures)
    if failure:
        print(failure, file=sys.stderr, flush=True)
        print(
            f"GPU CHECK FAILED ({form.name} form, run {run}) in phase {phases.current}: {failure.splitlines()[0]}",
            flush=True,
        )
        return 1
    print(
        f"GPU CHECK PASSED ({form.name} form, run {run}; train on with GPU_CHECK_RESUME={run} GPU_CHECK_STEPS=N)",
        flush=True,
    )
    return 0


def checked(form, knobs, layout, figures, usage, phases, budget, procs, logs, roots, work) -> None:
    """The run and its assertions; raises NotReady/AssertionError with the cause."""
    run, out_dir = layout.run, layout.out
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

    model = layout.model
    engine_port, capture_port = free_port(), free_port()
    engine_url, capture_url = f"http://127.0.0.1:{engine_port}", f"http://127.0.0.1:{capture_port}"
    services = os.pathsep.join([str(REPO / "services"), os.environ.get("PYTHONPATH", "")])
    base_env = {
        **os.environ,
        "PYTHONPATH": services,
        "HF_HOME": str(layout.run_dir / "hf-home"),
        "PYTHONUNBUFFERED": "1",
    }
    # The production probe grades this engine as it would any: no acceptance of an unmeasurable gap.
    base_env.pop(UNPROVEN_OK, None)
    engine_env = check_form.engine_env(
        form,
        {
            **base_env,
            "MODEL": str(model),
            "ENGINE_PORT": str(engine_port),
            "ENGINE_MAX_MODEL_LEN": "8192",
            "TOOL_CALL_PARSER": "hermes",
        },
    )
    bucket = layout.bucket
    trainer_env = check_form.trainer_env(
        form,
        {
            **base_env,
            "MODEL": str(model),
            "ENGINE_URL": engine_url,
            "BUCKET_DIR": str(bucket),
            "HF_HOME": str(bucket / "hf-home"),
            "BUCKET_NOT_A_MOUNT_OK": "i-accept-losing-checkpoints",
            "SANDBOX": "docker",
            "TUNNEL_PROVIDER": "direct",
            "COMPOSE_PROFILES": "",
            "DATASETS": "local",
            "MIN_FREE_DISK_GB": "0",
            "NUM_GENERATIONS": "4",
            "SAVE_STEPS": "1",
            # The production dtype path, named rather than left to the default (PRODUCTION above).
            "TRAIN_DTYPE": "float32",
            # The engine serves bf16: an update far under a bf16 ulp of a served weight is rounded away when the
            # engine casts what it is pushed, so 1e-6 (the default) would leave its logprobs unchanged. 5e-4
            # collapsed the random model to one token by step 2 (every sampled logprob 0.0, which the trainer then
            # masks as zero-filled): 2e-5 sits between.
            "LEARNING_RATE": "2e-5",
            "MAX_OUTPUT_TOKENS": "128",
            "AGENT_STEP_LIMIT": "3",
            "ENGINE_MAX_MODEL_LEN": "8192",
            "REPORT_TO": "tensorboard",
            # A compile cache, shared by the runs on one machine (it holds no run state).
            "TORCHINDUCTOR_CACHE_DIR": str(work / "inductor"),
            **check_settings.trainer_env(knobs, run),
        },
    )
    figures["process_env"] = {
        name: {k: env.get(k) for k in check_form.SHOWN}
        for name, env in (("engine", engine_env), ("trainer", trainer_env))
    }

    with phases("preflight"):
        problems = preflight(form, engine_env, trainer_env)
        if form.name == check_form.ONE:
            problems += [p for p in [ipc_engine_problem(engine_env)] if p]
        card = usage.card_mib.get(0)
        fit = check_form.fit_problem(form, card) if card else None
        if fit:
            problems.append(fit)
        if problems:
            raise NotReady(
                "\n".join([f"{len(problems)} problem(s) found before anything started on the GPU:", *problems])
            )

    with phases("build-model"):
        build_model(model, budget.left())

    t0 = time.monotonic()
    with phases("engine-start"):
        engine = subprocess.Popen(
            [sys.executable, "-m", "engine"], env=engine_env, stdout=logs["engine"], stderr=subprocess.STDOUT
        )
        procs.append(engine)
        roots[engine.pid] = "engine (the launcher's vllm serve and its engine core)"
        # TMPDIR: the probe remembers a model it proved in the temp folder; a run's own folder keeps an earlier
        # run's proof (same model path) from standing in for this engine's.
        (layout.run_dir / "tmp").mkdir(exist_ok=True)
        probe_env = {**base_env, "ENGINE_PORT": str(engine_port), "TMPDIR": str(layout.run_dir / "tmp")}
        healthy = command_check([sys.executable, "-m", "engine.probe"], probe_env)
        limit, name = budget.limit(knobs.engine_timeout_s, "GPU_CHECK_ENGINE_TIMEOUT_S")
        start_s = wait_until(healthy, engine, "engine", limit, log=out_dir / "engine.log", limit_name=name)
        figures["engine_start_s"] = round(start_s, 1)
        figures["engine_probe"] = healthy.said
        logs["engine"].flush()
        figures["engine_argv"] = line_after((out_dir / "engine.log").read_text(errors="replace"), "engine: vllm serve")
        print(f"engine up in {figures['engine_start_s']} s: {healthy.said}", flush=True)

    with phases("validate"):
        from openenv.core.harness.capture.validate_llm import validate_llm

        report = validate_llm(engine_url + "/v1", model=str(model))
        figures["openenv_capture_level"] = report.capture_level
        print(f"OpenEnv validate_llm: capture_level={report.capture_level} findings={report.findings}", flush=True)
        assert report.capture_level == "tokens", f"OpenEnv's validate_llm graded the engine {report}"

    with phases("proxy-start"):
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

        limit, name = budget.limit(60, "the proxy's own limit")
        wait_until(Readiness(proxy_health), proxy, "proxy", limit, log=out_dir / "proxy.log", limit_name=name)

    with phases("throughput"):
        figures["generation_tok_s"] = {}
        for n in (1, 16, 64):
            figures["generation_tok_s"][n] = round(throughput(engine_url, str(model), n))
            print(f"generation: {figures['generation_tok_s'][n]} tok/s at {n} concurrent", flush=True)
        idle = usage.sample()
        figures["gpu_mib_engine_idle"] = {gpu: used for gpu, (used, _busy) in idle.gpus.items()} if idle else None
        before = first_token_logprobs(engine_url, str(model))
        figures["engine_logprobs_before"] = before

    t_train = time.monotonic()
    with phases("train"):
        trainer = subprocess.Popen(
            [sys.executable, str(HERE / "run_trainer.py"), capture_url],
            env=trainer_env,
            stdout=logs["trainer"],
            stderr=subprocess.STDOUT,
        )
        procs.append(trainer)
        roots[trainer.pid] = "trainer"
        limit, name = budget.limit(knobs.train_timeout_s, "GPU_CHECK_TRAIN_TIMEOUT_S")
        run_until(
            trainer,
            "trainer",
            limit,
            name,
            log=out_dir / "trainer.log",
            watch=((engine, "engine", out_dir / "engine.log"), (proxy, "capture proxy", out_dir / "proxy.log")),
        )
        figures["trainer_wall_s"] = round(time.monotonic() - t_train, 1)
        logs["trainer"].flush()
        log = (out_dir / "trainer.log").read_text(errors="replace")
        figures |= trainer_said(log)
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
        if trainer.returncode != 0:
            cut = log[log.find("Traceback") :][:6000] if "Traceback" in log else "\n".join(log.splitlines()[-40:])
            raise NotReady(f"the trainer exited with {trainer.returncode}; from {out_dir / 'trainer.log'}:\n{cut}")

    with phases("compare"):
        after = first_token_logprobs(engine_url, str(model))
        figures["engine_logprobs_after"] = after
        run_dir = bucket / "checkpoints" / run
        status = json.loads((run_dir / "status.json").read_text())
        figures["status"] = status
        checkpoints = sorted(p.name for p in run_dir.glob("checkpoint-*"))
        figures["checkpoints"] = checkpoints
        assert checkpoints, f"no checkpoint under {run_dir}"
        figures["logprob_match"] = engine_vs_checkpoint(
            engine_url, str(model), run_dir / checkpoints[-1], model, form.compare_device
        )
        figures["total_s"] = round(time.monotonic() - t0, 1)

    with phases("assert"):
        steps, trained = knobs.steps, knobs.steps - layout.start_step
        assert figures["trainer_precision"] == PRODUCTION.describe(), (
            f"the trainer ran {figures['trainer_precision']!r}, not the production path {PRODUCTION.describe()!r}"
        )
        assert figures["trainer_weight_transfer"] == form.weight_transfer, (
            f"the trainer pushed by {figures['trainer_weight_transfer']!r}, not the {form.name} form's "
            f"{form.weight_transfer!r}"
        )
        assert status["state"] == "finished" and status["step"] == steps, f"the run's status is {status}"
        assert f"checkpoint-{steps}" in checkpoints, f"no checkpoint-{steps} among {checkpoints}"
        assert (run_dir / f"checkpoint-{steps}" / "model.safetensors").is_file() or list(
            (run_dir / f"checkpoint-{steps}").glob("model*.safetensors")
        ), "no model weights in the last checkpoint"
        syncs = figures["perf/weight_sync_s"]
        assert len(syncs) >= trained, f"{len(syncs)} weight pushes logged for {trained} steps: {syncs}"
        assert after != before, f"the engine's logprobs did not change after {trained} pushed steps: {before}"
        samples = figures["rollout/samples_per_rollout"]
        assert samples and set(samples) == {1.0}, f"rollout/samples_per_rollout {samples}: rollouts forked"
        forked = figures["harbor/forked_rollout_frac"]
        assert set(forked) == {0.0}, f"harbor/forked_rollout_frac {forked}"
        assert max(figures["rollout/turns_max"] or [0]) > 1, "no multi-turn rollout: chaining was not exercised"
        match = figures["logprob_match"]["trained"]
        assert match["mean_abs"] <= LOGPROB_MEAN_TOL and match["max_abs"] <= LOGPROB_MAX_TOL, (
            f"the engine does not serve the trained weights: {figures['logprob_match']} (tolerance mean "
            f"{LOGPROB_MEAN_TOL}, max {LOGPROB_MAX_TOL})"
        )
        assert any(line.startswith("trainer memory") for line in figures["memory_report"]), "no startup memory report"


def summary_rows(f: dict) -> list[tuple[str, str]]:
    """(figure, value) for the printed table; "-" for what the run did not reach."""

    def get(key, fmt=str):
        value = f.get(key)
        return "-" if value in (None, [], {}) else fmt(value)

    usage = f.get("gpu_usage") or {}
    busy = usage.get("busy_pct_mean") or {}
    match = f.get("logprob_match") or {}

    def diff(name):
        m = match.get(name)
        return "-" if not m else f"mean {m['mean_abs']:.4f}, max {m['max_abs']:.4f} over {m['tokens']} tokens"

    transfer = "NCCL" if f.get("form") == check_form.TWO else "IPC"
    return [
        ("engine start (launcher to probe-healthy)", get("engine_start_s", lambda v: f"{v} s")),
        ("engine probe", get("engine_probe")),
        (
            "generation tok/s at 1 / 16 / 64 concurrent",
            get("generation_tok_s", lambda v: " / ".join(map(str, v.values()))),
        ),
        ("trainer dtype path", get("trainer_precision")),
        ("trainer attention kernel", get("trainer_attention_kernel")),
        ("step time (perf/step_s per step)", get("perf/step_s")),
        ("fwd+bwd (perf/fwd_bwd_s)", get("perf/fwd_bwd_s")),
        ("seconds per push (perf/weight_sync_s)", get("perf/weight_sync_s")),
        (f"of which {transfer} transfer (perf/weight_sync_transfer_s)", get("perf/weight_sync_transfer_s")),
        ("first push", get("trainer_first_sync")),
        ("TRL ratio / kl per step", f"{get('ratio')} / {get('kl')}"),
        (
            "samples per rollout / forked frac / turns max",
            f"{get('rollout/samples_per_rollout')} / {get('harbor/forked_rollout_frac')} / {get('rollout/turns_max')}",
        ),
        (
            "engine logprobs changed by the pushes",
            "-"
            if "engine_logprobs_after" not in f
            else str(f["engine_logprobs_after"] != f.get("engine_logprobs_before")),
        ),
        ("engine vs trained checkpoint, per-token |dlogprob|", diff("trained")),
        ("engine vs initial weights (for scale)", diff("initial")),
        (f"peak GPU memory per process, MiB ({usage.get('source', '-')})", str(usage.get("process_peak_mib", "-"))),
        ("trainer's own torch peak, MiB", get("trainer_torch_peak_mib")),
        ("peak GPU memory per GPU, MiB", str(usage.get("gpu_peak_mib", "-"))),
        ("GPU busy % (mean of 1 s samples) by phase", str(busy) if busy else "-"),
        ("checkpoints", get("checkpoints")),
        ("whole check (engine launch to the end)", get("total_s", lambda v: f"{v} s")),
    ]


def print_summary(f: dict) -> None:
    form = f.get("form", "-")
    rows = "".join(f"| {form} | {name} | {value} |\n" for name, value in summary_rows(f))
    print(f"\n{f.get('form_detail', '')}\n| form | figure | value |\n|---|---|---|\n{rows}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
