"""pass@k and its intervals, against values worked out by hand (trainer/evaluation/passk.py)."""

import math

import pytest

from trainer.evaluation.passk import bootstrap_mean_interval, pass_at_k, suite_pass_at_k, wilson_interval


def test_unbiased_pass_at_k():
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4)
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - math.comb(3, 2) / math.comb(5, 2))  # 0.7
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)
    assert pass_at_k(4, 0, 2) == 0.0
    assert pass_at_k(3, 2, 2) == 1.0  # fewer failures than k: some k-subset always passes
    with pytest.raises(ValueError, match="needs at least 3"):
        pass_at_k(2, 1, 3)


def test_wilson_known_bounds():
    low, high = wilson_interval(0, 10)
    assert low == 0.0 and high == pytest.approx(0.27753, abs=1e-5)
    low, high = wilson_interval(5, 10)
    assert (low, high) == (pytest.approx(0.23659, abs=1e-5), pytest.approx(0.76341, abs=1e-5))
    low, high = wilson_interval(10, 10)
    assert low == pytest.approx(0.72247, abs=1e-5) and high == 1.0
    assert wilson_interval(0, 0) == (0.0, 1.0)


def test_suite_pass_at_1_is_pooled_with_wilson():
    doc = suite_pass_at_k([(1, 1), (1, 0), (1, 1), (1, 0)], 1)
    assert doc["value"] == 0.5 and doc["method"] == "wilson-95"
    assert (doc["ci_low"], doc["ci_high"]) == (pytest.approx(0.15004, abs=1e-5), pytest.approx(0.84996, abs=1e-5))


def test_suite_pass_at_k_bootstraps_over_tasks_and_skips_short_tasks():
    doc = suite_pass_at_k([(4, 2), (4, 0), (4, 4), (1, 1)], 2)
    # per task: 1 - C(2,2)/C(4,2) = 5/6, 0, 1; the task with one attempt cannot give pass@2
    assert doc["value"] == pytest.approx((5 / 6 + 0 + 1) / 3)
    assert doc["tasks_skipped"] == 1 and doc["method"] == "bootstrap-95-over-tasks"
    assert 0.0 <= doc["ci_low"] < doc["value"] < doc["ci_high"] <= 1.0
    assert suite_pass_at_k([(4, 2), (4, 0), (4, 4)], 2) == {**doc, "tasks_skipped": 0}  # seeded: reproducible


def test_bootstrap_of_identical_tasks_has_no_width():
    assert bootstrap_mean_interval([0.25] * 7) == (0.25, 0.25)
