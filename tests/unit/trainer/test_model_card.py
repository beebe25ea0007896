"""The model card: front matter, the before/after eval table, the reward summary, settings without secrets."""

from stack.readers.trainer import from_env
from trainer.evaluation.evaluate import summarize
from trainer.hub.model_card import card_settings, render, reward_summary


def doc(label, passes, n, step=None):
    from trainer.evaluation.evaluate import Attempt

    attempts = [Attempt("/data/held", i, f"h{i}", 0, 1.0 if i < passes else 0.0) for i in range(n)]
    return {**summarize(attempts, [1], label=label, splits=["/data/held"], held_out=True), "step": step}


def test_reward_summary_from_log_history():
    history = [{"step": s, "harbor/reward_mean": r} for s, r in [(1, 0.1), (2, 0.3), (3, 0.2), (4, 0.6)]]
    history.insert(2, {"step": 2, "loss": 0.5})  # rows without the reward are skipped
    assert reward_summary(history) == {
        "logged_steps": 4,
        "first": (1, 0.1),
        "last": (4, 0.6),
        "best": (4, 0.6),
        "first_quarter_mean": 0.1,
        "last_quarter_mean": 0.6,
    }
    assert reward_summary([{"step": 1, "loss": 1.0}]) is None


def test_card_has_metadata_eval_table_reward_and_no_secret():
    s = from_env(
        {
            "MODEL": "Qwen/Qwen3-1.7B",
            "RUN_NAME": "r1",
            "DATASETS": "/data/train",
            "EVAL_DATASETS": "/data/held",
            "EVAL_STEPS": "50",
            "HUB_MODEL_ID": "me/qwen-harbor",
            "HUB_TOKEN": "hf_SECRETSECRET",
        }
    )
    card = render(
        repo_id=s.hub.model_id,
        run_name=s.run_name,
        step=200,
        settings=card_settings(s),
        versions={"trl": "1.16.0", "openenv": "0.10.0"},
        reward={
            "logged_steps": 200,
            "first": (1, 0.1),
            "last": (200, 0.4),
            "best": (180, 0.45),
            "first_quarter_mean": 0.12,
            "last_quarter_mean": 0.38,
        },
        evals=[doc("base Qwen/Qwen3-1.7B", 3, 8), doc("step 200", 5, 8, 200)],
    )
    assert card.startswith("---\nbase_model: Qwen/Qwen3-1.7B\nlibrary_name: transformers\ntags:\n- trl\n")
    assert "# qwen-harbor\n" in card and "Run `r1`, step 200." in card
    assert "| base Qwen/Qwen3-1.7B | held | 8 | 8 / 8 | 37.5% [13.7%, 69.4%] |" in card
    assert "| step 200 | held | 8 | 8 / 8 | 62.5% [30.6%, 86.3%] |" in card
    assert "0.100 at step 1 -> 0.400 at step 200 (best 0.450 at step 180)" in card
    assert "| training datasets | /data/train |" in card and "| trl | 1.16.0 |" in card
    assert "hf_SECRET" not in card and "hf_SECRET" not in repr(s)
