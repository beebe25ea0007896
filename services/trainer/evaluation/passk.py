"""pass@k and its confidence interval: the numbers an evaluation reports.

- pass@k per task is the unbiased estimator of Chen et al. (2021, "Evaluating Large Language Models
  Trained on Code"): with n scored attempts of which c passed, 1 - C(n-c, k) / C(n, k). It uses every
  attempt, where "k of n passed at least once" would waste n - k of them.
- pass@1 over a suite is pooled: passes over scored attempts. Its 95% interval is the WILSON score
  interval, which stays inside [0, 1] and is honest at 0/n and n/n, where the normal approximation
  collapses to a zero-width interval. It treats attempts as independent: exact when each task is
  attempted once (EVAL_ATTEMPTS=1, the default); with several attempts per task, attempts of one task
  are correlated and the interval is somewhat too narrow.
- pass@k for k > 1 is the mean of the per-task estimates; its 95% interval is a percentile BOOTSTRAP
  over tasks (tasks resampled with replacement, 2000 resamples, a fixed seed so a report is
  reproducible), because the per-task values are not a binomial count.

Unscorable attempts (sandbox or verifier failed) are not failures: they are left out of n and counted
on their own, as training leaves them out of a group's baseline.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

Z95 = 1.959963984540054  # two-sided 95% normal quantile
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n attempts with c passes (requires n >= k)."""
    if not 0 <= c <= n:
        raise ValueError(f"passes c={c} must be between 0 and attempts n={n}")
    if k < 1 or n < k:
        raise ValueError(f"pass@{k} needs at least {k} scored attempts, got {n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def wilson_interval(successes: int, trials: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion; (0, 1) when there are no trials."""
    if trials <= 0:
        return 0.0, 1.0
    p = successes / trials
    denom = 1.0 + z * z / trials
    center = (p + z * z / (2 * trials)) / denom
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denom
    # At 0/n and n/n the bound is exactly 0 or 1; say so rather than 0.9999999999999999.
    low = 0.0 if successes == 0 else max(0.0, center - half)
    high = 1.0 if successes == trials else min(1.0, center + half)
    return low, high


def bootstrap_mean_interval(
    values: Sequence[float], resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED
) -> tuple[float, float]:
    """Percentile bootstrap 95% interval of the mean of `values` (one value per task)."""
    if not values:
        return 0.0, 1.0
    rng = random.Random(seed)
    n = len(values)
    means = sorted(sum(values[rng.randrange(n)] for _ in range(n)) / n for _ in range(resamples))
    return means[int(0.025 * (resamples - 1))], means[int(0.975 * (resamples - 1))]


def suite_pass_at_k(per_task: Sequence[tuple[int, int]], k: int) -> dict:
    """pass@k over a suite from (scored attempts, passes) per task, with its interval and method.

    Tasks with fewer than k scored attempts cannot be estimated at k and are left out (counted in
    `tasks_skipped`)."""
    usable = [(n, c) for n, c in per_task if n >= k]
    skipped = len(per_task) - len(usable)
    if not usable:
        return {"k": k, "value": None, "ci_low": None, "ci_high": None, "method": None, "tasks_skipped": skipped}
    if k == 1:
        passes, trials = sum(c for _, c in usable), sum(n for n, _ in usable)
        low, high = wilson_interval(passes, trials)
        return {
            "k": 1,
            "value": passes / trials,
            "ci_low": low,
            "ci_high": high,
            "method": "wilson-95",
            "tasks_skipped": skipped,
        }
    values = [pass_at_k(n, c, k) for n, c in usable]
    low, high = bootstrap_mean_interval(values)
    return {
        "k": k,
        "value": sum(values) / len(values),
        "ci_low": low,
        "ci_high": high,
        "method": "bootstrap-95-over-tasks",
        "tasks_skipped": skipped,
    }
