"""Read Prometheus text exposition (what vLLM's and cloudflared's `/metrics` serve): enough of the format
for gauges and counters, the only kinds `scripts/status` reads. Histograms' samples parse too (as plain
samples) but nothing here sums buckets."""

from __future__ import annotations

import math
import re
import urllib.error
import urllib.request

_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)")


def parse(text: str) -> dict[str, float]:
    """Metric name -> value summed over its label sets (vLLM labels each engine of a data-parallel
    deployment separately; the stack's figure is their sum). Comments and unparsable lines are skipped."""
    totals: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if not match:
            continue
        try:
            value = float(match["value"])
        except ValueError:
            continue
        if math.isnan(value):
            continue
        totals[match["name"]] = totals.get(match["name"], 0.0) + value
    return totals


def scrape(url: str, timeout: float = 5.0) -> dict[str, float] | str:
    """The parsed metrics, or one line saying why there are none."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return parse(resp.read(2_000_000).decode("utf-8", "replace"))
    except (OSError, urllib.error.URLError, ValueError) as exc:
        return f"{url} not readable ({type(exc).__name__}: {exc})"
