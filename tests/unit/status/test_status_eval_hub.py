"""scripts/status's evaluation and Hub lines, from the fields the trainer writes to status.json."""

from __future__ import annotations

from stackstatus import report


def test_nothing_when_neither_is_configured():
    assert report.eval_and_hub_lines({"state": "training"}) == []


def test_baseline_to_latest_and_a_failed_push_with_its_fix():
    doc = {
        "eval_baseline": {
            "pass_at_1": 0.125,
            "ci_low": 0.05,
            "ci_high": 0.3,
            "label": "base m",
            "scored_attempts": 8,
            "attempts": 8,
        },
        "eval": {
            "pass_at_1": 0.5,
            "ci_low": 0.3,
            "ci_high": 0.7,
            "label": "step 50",
            "scored_attempts": 7,
            "attempts": 8,
        },
        "hub": {
            "repo": "me/m",
            "state": "failed",
            "pushed": ["checkpoint-25"],
            "attempt": 5,
            "last_error": "final: HfHubHTTPError: 500",
            "fix": "retry from the bucket: scripts/publish r1",
        },
    }
    assert report.eval_and_hub_lines(doc) == [
        "eval        baseline pass@1 12% [5%, 30%] (base m, 8/8 scored)  ->  latest pass@1 50% [30%, 70%] (step 50, 7/8 scored)",
        "hub         me/m: failed, pushed checkpoint-25  PUSH FAILED (attempt 5): final: HfHubHTTPError: 500; "
        "retry from the bucket: scripts/publish r1",
    ]
