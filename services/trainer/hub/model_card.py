"""The model card (README.md) pushed with the model: what was trained, how, on what, and did it help.

Everything in it is read from the run itself: the settings the trainer ran with (never a secret), the
installed versions, the reward curve from the trainer's log history, and the evaluation documents
(baseline and periodic, trainer/evaluation/evaluate.py) as the before/after table.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib import metadata
from typing import Any

from ..evaluation.evaluate import comparison_table

REWARD_KEY = "harbor/reward_mean"
PACKAGES = ("trl", "openenv", "transformers", "torch", "accelerate", "datasets", "huggingface-hub", "vllm")


def installed_versions(packages: Sequence[str] = PACKAGES) -> dict[str, str]:
    versions = {}
    for name in packages:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def card_settings(s: Any) -> dict[str, Any]:
    """The run's settings that shape the model. Listed by name: a token can never slip in."""
    e = s.evaluation
    return {
        "base model": s.model,
        "harness": s.harness,
        "sandbox": s.sandbox,
        "training datasets": ", ".join(s.datasets) or "every split the env server serves",
        "screened tasks": s.screened_tasks or "no (every task)",
        "agent step limit": s.agent_step_limit,
        "max steps": s.max_steps,
        "generations per task": s.num_generations,
        "learning rate": s.learning_rate,
        "temperature": s.temperature,
        "max completion tokens": s.max_completion_tokens,
        "token budget": s.token_budget,
        "reward": f"verifier {'reward' if not s.reward_key else repr(s.reward_key)} + tool-efficiency bonus "
        f"{s.tool_efficiency_bonus}",
        "weight transfer": s.weight_transfer,
        "eval": f"{', '.join(e.datasets) or '-'}, {e.attempts} attempt(s)/task, temperature {e.temperature}, "
        f"top_p {e.top_p}, every {e.steps or '-'} steps",
    }


def reward_summary(log_history: Sequence[dict]) -> dict | None:
    """First, last and best logged reward mean, and the means of the first and last quarter of steps."""
    points = [(int(h["step"]), float(h[REWARD_KEY])) for h in log_history if h.get(REWARD_KEY) is not None]
    if not points:
        return None
    quarter = max(1, len(points) // 4)
    best = max(points, key=lambda p: p[1])
    return {
        "logged_steps": len(points),
        "first": points[0],
        "last": points[-1],
        "best": best,
        "first_quarter_mean": sum(v for _, v in points[:quarter]) / quarter,
        "last_quarter_mean": sum(v for _, v in points[-quarter:]) / quarter,
    }


def render(
    *,
    repo_id: str,
    run_name: str,
    step: int,
    settings: dict[str, Any],
    versions: dict[str, str],
    reward: dict | None,
    evals: Sequence[dict],
) -> str:
    base = settings.get("base model", "")
    front = ["---", f"base_model: {base}", "library_name: transformers", "tags:"]
    front += [f"- {t}" for t in ("trl", "grpo", "async-grpo", "openenv", "harbor", "reinforcement-learning")]
    front.append("---")
    if reward:
        reward_text = (
            f"Mean verifier reward per step (`{REWARD_KEY}`), {reward['logged_steps']} logged steps: "
            f"{reward['first'][1]:.3f} at step {reward['first'][0]} -> {reward['last'][1]:.3f} at step "
            f"{reward['last'][0]} (best {reward['best'][1]:.3f} at step {reward['best'][0]}); mean of the first "
            f"quarter {reward['first_quarter_mean']:.3f}, of the last quarter {reward['last_quarter_mean']:.3f}."
        )
    else:
        reward_text = "No reward was logged."
    eval_text = comparison_table(evals) if evals else "No evaluation was run (set EVAL_DATASETS and EVAL_STEPS)."
    rows = "\n".join(f"| {k} | {v} |" for k, v in settings.items())
    vrows = "\n".join(f"| {k} | {v} |" for k, v in versions.items())
    return (
        "\n".join(front) + f"\n\n# {repo_id.split('/')[-1]}\n\n"
        f"`{base}` trained with reinforcement learning (TRL AsyncGRPO) as a coding agent on Harbor tasks: the "
        f"agent ran in sandboxes and every model call went through OpenEnv's capture proxy, so training used the "
        f"engine's own tokens and logprobs. Run `{run_name}`, step {step}.\n\n"
        f"## Evaluation\n\n{eval_text}\n\n"
        f"## Training reward\n\n{reward_text}\n\n"
        f"## Settings\n\n| setting | value |\n|---|---|\n{rows}\n\n"
        f"## Versions\n\n| package | version |\n|---|---|\n{vrows}\n"
    )
