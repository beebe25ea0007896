"""The one canonical AsyncGRPO training script for Harbor tasks.

    guards -> run name / resume -> task rows from the env server -> ONE serial warm-up rollout
                                                 (meanwhile: TRL import, tokenizer, rollout child spawned)
    -> AsyncGRPOTrainer(rollout_worker=HarborRolloutWorker(factory), weight_transfer=nccl|mock) -> train

The warm-up rollout runs alone before any group runs concurrently: the first rollout of a sandbox
template builds it (E2B template, docker image), and eight parallel first rollouts would build it eight
times or time out together. It doubles as the token-contract check: a rollout whose captures carry no
prompt_token_ids stops the run here, naming the vLLM flags, before the model is even loaded.
"""

from __future__ import annotations

import concurrent.futures
import functools
import logging
import os
import threading
import time

from openenv.core.harness.capture.upstream import training_sampling

from stack.backends import WEIGHT_TRANSFERS
from stack.env import EnvError
from stack.readers.trainer import Settings
from stack.resume import Pick
from stack.resume import pick as resume_pick
from stack.sizing import precision
from stack.sizing.limits import GC, GC_COMPILE, UnknownModel, derive_limits, startup_report

from . import hooks
from .report import reporting
from .rollouts import staleness
from .rollouts.factory import HarborSessionFactory, runner_from_settings
from .rollouts.reward import HarborReward
from .rollouts.session import RolloutFailed
from .rollouts.task_select import training_rows
from .transfer import weights
from .watch import engine_gone, healthcheck, mismatch, stop
from .watch.dropped_samples import DroppedSampleCounter
from .watch.engine_gone import EngineGone, HealthWatch
from .watch.status import RunStatus
from .watch.status_callback import StatusCallback
from .watch.stop_rules import StopRules
from .watch.stop_rules import from_env as stop_rules_from_env

logger = logging.getLogger("trainer")


def policy(s: Settings) -> dict:
    """The sampling policy sent with every rollout: the same dict TRL's harness loop derives."""
    return training_sampling({"temperature": s.temperature, "top_p": 1.0, "top_k": 0, "repetition_penalty": 1.0})


def warm_up(runner, rows: list[dict], s: Settings) -> dict:
    factory = HarborSessionFactory(runner, reward_key=s.reward_key, sampling=policy(s))
    session = factory.create(rows[0]["prompt"], seed=0, episode_id="warm-up")
    t0 = time.monotonic()
    timed_out = False
    try:
        session.wait_for_completion()
    except TimeoutError:
        timed_out = True
    except RolloutFailed as exc:
        raise SystemExit(
            f"trainer: the warm-up rollout failed ({exc}). Fix the sandbox/env server (see the env-server logs) "
            "before paying for training"
        ) from None
    trace = session.fetch_training_trace()  # raises naming the vLLM flags when token ids are missing
    reward = session.verify([]).env_reward  # raises when REWARD_KEY names no reward of this suite
    summary = {
        "task": rows[0].get("task_id"),
        "turns": len(trace.turns),
        "reward": reward,
        "timed_out": timed_out,
        "wall_s": round(time.monotonic() - t0, 1),
    }
    print(f"trainer: warm-up rollout done: {summary}", flush=True)
    return summary


def _eos_ids(model: str, tokenizer) -> list[int]:
    from transformers import GenerationConfig

    ids: list[int] = []
    try:
        eos = GenerationConfig.from_pretrained(model).eos_token_id
        ids = [eos] if isinstance(eos, int) else list(eos or [])
    except OSError:
        pass
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
        ids.insert(0, tokenizer.eos_token_id)
    return ids


def _loop_owning_tokenizer(tokenizer):
    """TRL's worker requires a response parser for the tokenizer even when the agent owns its loop.

    In loop-owning mode the parser is never used: the agent reads its own replies (the engine returns
    tool calls parsed) and the trainer trains on the captured ids. TRL knows the templates of the models
    this stack targets (Qwen3 and others); for one it does not (the mock engine's character-level
    template), a marker fills the slot, and any code path that did try to parse with it fails loudly.
    """
    from trl.chat_template_utils import add_response_schema

    if getattr(tokenizer, "response_template", None) is None and getattr(tokenizer, "response_schema", None) is None:
        try:
            tokenizer = add_response_schema(tokenizer)
        except ValueError:
            logger.info("TRL does not know this chat template; loop-owning rollouts never parse with it")
            tokenizer.response_template = {"unused": "loop-owning harness: the agent parses its own replies"}
    return tokenizer


def run(s: Settings, runner=None, rules: StopRules | None = None) -> None:
    runner = runner or runner_from_settings(s)
    rules = rules or stop_rules_from_env()
    s.run_dir.mkdir(parents=True, exist_ok=True)
    status = RunStatus(s.status_path, s.run_name, s.max_steps)
    healthcheck.announce(s.status_path)  # the container healthcheck follows this run's status file
    try:
        chosen_checkpoint = resume_pick(s.run_dir) if s.run_name_explicit else Pick()
    except EnvError as exc:  # every checkpoint broken: refused, not trained again from step 0 under its name
        status.update(state="failed", reason=str(exc))
        print(f"trainer: {exc}", flush=True)
        raise SystemExit(1) from None
    for line in chosen_checkpoint.passed_over:
        print(f"trainer: {line}", flush=True)
    resume = chosen_checkpoint.path
    status.update(state="warming-up", last_checkpoint=resume.name if resume else None)
    print(
        f"trainer: run {s.run_name} -> {s.run_dir}"
        + (f" (resuming from {resume.name})" if resume else " (new run)")
        + f"; agent step limit {s.agent_step_limit}, weight transfer {s.weight_transfer}",
        flush=True,
    )
    print(f"trainer: {rules.describe()}", flush=True)
    chosen = precision.choose(s.weight_transfer, s.dtype)
    print(
        f"trainer: {chosen.describe()} at learning rate {s.learning_rate:g} ({s.lr_scheduler}); max_staleness "
        f"{staleness.max_staleness_for(s)} steps" + ("" if s.max_staleness is not None else " (auto)"),
        flush=True,
    )
    if precision.warning(chosen, s.learning_rate):
        print(f"WARNING {precision.warning(chosen, s.learning_rate)}", flush=True)
    try:
        _train(s, runner, status, resume, rules)
    except stop.StopRequested as exc:
        # Before the training loop: no step to save. Not a failure: the operator stopped it.
        status.update(state="stopped", reason=str(exc))
        print(f"trainer: stopped ({exc}); nothing to save yet", flush=True)
    except EngineGone as gone:
        engine_gone.stop_run(gone, status, s, resume)  # status, the one line, SystemExit(4)
    except BaseException as exc:
        status.update(state="failed", error=f"{type(exc).__name__}: {exc}"[:2000])
        raise
    if rules.tripped:
        # After train() returned: the checkpoint of the tripping step is written and on_train_end has
        # said "finished", which this replaces. A distinct exit code, so compose shows the stop.
        status.update(state="stopped-by-rule", stop_rule=rules.tripped.as_status())
        print(rules.tripped.line, flush=True)
        raise SystemExit(3)


def _train(s: Settings, runner, status: RunStatus, resume, rules: StopRules) -> None:
    # Before anything imports trackio, which reads its folder once, at import.
    report_to, report_args = reporting.prepare(s.report_to, s.dashboard_dir, s.run_name)
    all_rows = runner.task_rows()  # training and held-out splits: the env server serves both
    try:
        rows = training_rows(all_rows, s.datasets, s.screened_tasks)
        hooks.check(s, all_rows, status)
    except ValueError as exc:  # a setting names tasks that are not there: one line, before paying
        raise SystemExit(f"trainer: {exc}") from None
    print(
        f"trainer: {len(rows)} training task(s) of {len(all_rows)} served"
        + (f" (SCREENED_TASKS={s.screened_tasks})" if s.screened_tasks else ""),
        flush=True,
    )
    # The warm-up rollout is HTTP waiting; meanwhile this thread imports TRL and spawns the rollout child
    # (tens of seconds each on 2 cores, measured in the CPU form). The model is loaded only once the
    # warm-up passed: a bad sandbox or an engine without token ids still stops the run before that.
    # One watch of the engine for the main process: the warm-up and evaluation waits, and the rollout worker's
    # check_health while training waits for rollouts (trainer/watch/engine_gone.py).
    watch = HealthWatch(s.engine_url)
    here = runner.watching(watch) if hasattr(runner, "watching") else runner
    warm = _in_background(warm_up, here, rows, s)
    try:
        config, tokenizer, worker = _prepare(s, rows, runner, report_to, report_args, watch)
    except stop.StopRequested:
        raise
    except Exception:
        warm.result()  # a failed warm-up is the cause to report: it names the fix
        raise
    try:
        warm.result()
        _fit(s, here, status, resume, rules, rows, all_rows, config, tokenizer, worker)
    finally:
        # Idempotent: TRL stopped it if training ran; otherwise the child spawned early leaves at its gate,
        # having started no rollout.
        worker.stop()


def _fit(s: Settings, runner, status: RunStatus, resume, rules: StopRules, rows, all_rows, config, tokenizer, worker):
    import torch
    from trl.experimental.async_grpo import AsyncGRPOTrainer

    from datasets import Dataset

    dropped = DroppedSampleCounter()
    trainer = AsyncGRPOTrainer(
        model=s.model,
        args=config,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        rollout_worker=worker,
        weight_transfer=weights.build(s.weight_transfer, s.engine_url, s.weight_sync_timeout_s),
        callbacks=[StatusCallback(status), stop.StopCallback(), rules.callback()],
    )
    if trainer.weight_transfer is not None:
        # TRL 1.16.0 reads `trainer.weight_transfer` at train begin and on every sync (read at that tag): the first
        # sync reported, what the engine serves checked, a lost engine stopping the run (weights.chain).
        trainer.weight_transfer, served, _ = weights.chain(trainer.weight_transfer, s, os.environ, model=trainer.model)
        trainer.callback_handler.callbacks.insert(0, served.callback())
        # Groups started while the engine still serves older weights are stamped with that older version.
        worker.served = served
    # First in line, so trackio/tensorboard and status.json see the run total of samples TRL dropped
    # for exceeding TOKEN_BUDGET in the same `logs` dict (TRL itself logs only per-window counts).
    trainer.callback_handler.callbacks.insert(0, dropped.callback())
    # Engine-vs-trainer logprob mismatch on the trained tokens, measured inside TRL's own loss step (mismatch.py);
    # its callback goes first too, so reporters, status.json and STOP_MISMATCH_KL read it in the same logs dict.
    mismatch.install(trainer)
    hooks.install(trainer, s, runner, all_rows, status)  # periodic evaluation, Hub publishing
    if torch.cuda.is_available():
        _report_memory_limits(s, torch.cuda.get_device_properties(0).total_memory / 2**30)
        if s.compile_layers:
            for layer in getattr(getattr(trainer.model, "model", None), "layers", []):
                layer.compile(dynamic=True)
    else:
        print("trainer memory: no GPU (CPU form): step-limit and token-budget limits are not derived", flush=True)
    logger.info("torch %s, cuda=%s, %d task rows", torch.__version__, torch.cuda.is_available(), len(rows))
    try:
        trainer.train(resume_from_checkpoint=str(resume) if resume else None)
    except stop.StopRequested as exc:
        saved = stop.save_now(trainer)
        step = trainer.state.global_step
        status.update(state="stopped", step=step, last_checkpoint=saved if step else None, reason=str(exc))
        print(
            f"trainer: stopped at step {step} ({exc}); saved {saved if step else 'nothing (no step yet)'}", flush=True
        )
    except EngineGone as gone:
        # Raised in the push after step N or while step N+1's rollouts were awaited: either way the model holds
        # step N's weights. Saved as a SIGTERM saves it (stop.save_now, which keeps a checkpoint already there);
        # run() writes the status and the line.
        gone.step = trainer.state.global_step
        gone.saved = stop.save_now(trainer) if gone.step else None
        raise
    if stop.requested():
        print(f"trainer: resume this run with RUN_NAME={s.run_name}", flush=True)


def trl_config(s: Settings, report_to, report_args: dict, cpu: bool):
    """TRL's AsyncGRPOConfig from the settings: every TRL knob this stack sets, in one place."""
    from trl.experimental.async_grpo import AsyncGRPOConfig

    return AsyncGRPOConfig(
        output_dir=str(s.run_dir),
        run_name=s.run_name,
        project="asyncgrpo-harbor",
        max_steps=s.max_steps,
        learning_rate=s.learning_rate,
        lr_scheduler_type=s.lr_scheduler,
        num_generations=s.num_generations,
        max_completion_length=s.max_completion_tokens,
        temperature=s.temperature,
        max_tool_calling_iterations=s.agent_step_limit,
        token_budget=s.token_budget,
        per_device_train_batch_size=s.per_device_train_batch_size,
        gradient_accumulation_steps=s.gradient_accumulation_steps,
        max_inflight_tasks=s.max_inflight_rollouts,
        vllm_server_base_url=s.engine_url,
        save_strategy="steps",
        save_steps=s.save_steps,
        # Older checkpoints are deleted once a newer one is complete (preflight sized the disk for this).
        save_total_limit=s.save_total_limit,
        logging_steps=1,
        report_to=report_to,
        **report_args,
        **precision.choose(s.weight_transfer, s.dtype).trl_kwargs(),
        max_staleness=staleness.max_staleness_for(s),
        # TRL's own client bounds a push's group set-up, transfer and finalisation by it (1800 s by default).
        weight_sync_timeout=s.weight_sync_timeout_s,
        gradient_checkpointing=not cpu,
    )


def _prepare(s: Settings, rows: list[dict], runner, report_to, report_args, engine_watch=None):
    """TRL's config, the tokenizer and the rollout worker, its child spawned (held at its gate)."""
    from transformers import AutoTokenizer

    from datasets import Dataset

    from .device import cpu_form
    from .rollouts.worker import HarborRolloutWorker

    cpu = cpu_form.install()
    config = trl_config(s, report_to, report_args, cpu)
    tokenizer = AutoTokenizer.from_pretrained(s.model)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer = _loop_owning_tokenizer(tokenizer)
    worker = HarborRolloutWorker(
        cpu_form=WEIGHT_TRANSFERS.get(s.weight_transfer).cpu_form,
        engine_watch=engine_watch,
        harness_session_factory=functools.partial(HarborSessionFactory, runner=runner, reward_key=s.reward_key),
        rollout_reward_fn=HarborReward(s.tool_efficiency_bonus, s.agent_step_limit),
        model_name=s.model,
        dataset=Dataset.from_list(rows),
        reward_funcs=[],
        processing_class=tokenizer,
        eos_token_ids=_eos_ids(s.model, tokenizer),
        num_generations=s.num_generations,
        max_inflight_tasks=s.max_inflight_rollouts,
        queue_maxsize=config.queue_maxsize,
        vllm_server_url=s.engine_url,
        max_tokens=s.max_completion_tokens,
        temperature=s.temperature,
        top_p=config.top_p,
        top_k=config.top_k,
        min_p=config.min_p,
        repetition_penalty=config.repetition_penalty,
        request_timeout=config.request_timeout,
        max_tool_calling_iterations=s.agent_step_limit,
        fork_threshold_tokens=config.fork_threshold_tokens,
    )
    worker.prestart()
    return config, tokenizer, worker


def _in_background(fn, *args) -> concurrent.futures.Future:
    """fn(*args) on a daemon thread (an executor's worker would hold the interpreter's exit on SIGTERM)."""
    future: concurrent.futures.Future = concurrent.futures.Future()

    def call() -> None:
        try:
            future.set_result(fn(*args))
        except BaseException as exc:  # noqa: BLE001 - handed to whoever calls result()
            future.set_exception(exc)

    threading.Thread(target=call, name="warm-up", daemon=True).start()
    return future


def _report_memory_limits(s: Settings, card_gib: float) -> None:
    """The largest safe step limit and token budget for this card, from the measured memory profile;
    a warning when the configuration exceeds them. Printed before the first rollout group is paid for."""
    try:
        limits = derive_limits(
            card_gib,
            s.model,
            max_model_len=s.engine_max_model_len,
            setting=GC_COMPILE if s.compile_layers else GC,
            precision=precision.choose(s.weight_transfer, s.dtype),
        )
    except UnknownModel as exc:
        print(f"trainer memory: {exc}", flush=True)
        return
    info, warnings = startup_report(limits, s.agent_step_limit, s.token_budget)
    for line in info:
        print(line, flush=True)
    for line in warnings:
        print(f"WARNING {line}", flush=True)
