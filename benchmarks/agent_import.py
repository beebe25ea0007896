"""What the agent's model layer costs at start: litellm's class (mini-swe-agent's default) vs ours, side by side.

    python benchmarks/agent_import.py [--repeats N]

Run it with a Python that has mini-swe-agent 2.4.6 installed as the task images install it (`pip install
mini-swe-agent==2.4.6`, which brings litellm): the env-server image has one, or a scratch venv. Each figure is
the median of N fresh interpreters (a sandbox starts the agent once, with cold caches of its own): wall time and
CPU time of the import alone, and the process's peak RSS after it. `agent` is mini-swe-agent's own start (its
command-line module, the default agent, the local environment) without any model class; the model rows add
their class on top of that. Also prints what litellm and the packages only it needs occupy on disk, installed
but never imported on our path.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OURS_DIR = ROOT / "services" / "env_server"
AGENT = "minisweagent.run.mini, minisweagent.agents.default, minisweagent.environments.local"
ROWS = {
    "agent (no model class)": AGENT,
    "agent + litellm class": f"{AGENT}, minisweagent.models.litellm_model",
    "agent + ours": f"{AGENT}, asyncgrpo_chat_model",
}
CHILD = """
import json, resource, sys, time
t0, c0 = time.perf_counter(), time.process_time()
import {modules}
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
print(json.dumps({{"wall": wall, "cpu": cpu, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "litellm": "litellm" in sys.modules}}))
"""
# Packages litellm brings that mini-swe-agent's path without it does not import (mini-swe-agent 2.4.6 itself
# requires openai and datasets too: measured separately below).
LITELLM_ONLY = ("litellm", "tokenizers", "tiktoken", "aiohttp", "jsonschema", "importlib-metadata", "fastuuid")


def measure(modules: str, repeats: int) -> dict[str, float | bool]:
    env = {**os.environ, "PYTHONPATH": str(OURS_DIR), "LITELLM_LOCAL_MODEL_COST_MAP": "True", "MSWEA_CONFIGURED": "1"}
    runs = []
    for _ in range(repeats):
        out = subprocess.run(
            [sys.executable, "-c", CHILD.format(modules=modules)], env=env, capture_output=True, text=True, check=False
        )
        if out.returncode != 0:
            sys.exit(f"importing {modules} failed: {out.stderr.strip().splitlines()[-1]}")
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return {k: statistics.median(r[k] for r in runs) for k in ("wall", "cpu", "rss_mb")} | {
        "litellm": runs[0]["litellm"]
    }


def installed_mb(name: str) -> float | None:
    try:
        files = metadata.distribution(name).files or []
    except metadata.PackageNotFoundError:
        return None
    total = 0
    for f in files:
        path = Path(f.locate())
        if path.is_file():
            total += path.stat().st_size
    return total / 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5, help="fresh interpreters per row (default 5)")
    args = parser.parse_args(argv)
    try:
        version = metadata.version("mini-swe-agent")
    except metadata.PackageNotFoundError:
        sys.exit(
            "mini-swe-agent is not installed for this Python: run this with the env-server image's Python or a venv"
        )
    print(
        f"mini-swe-agent {version}, litellm {metadata.version('litellm')}, Python {sys.version.split()[0]}, "
        f"median of {args.repeats} fresh interpreters"
    )
    print(f"{'':26} {'wall s':>8} {'CPU s':>8} {'peak RSS MB':>12}  litellm imported")
    for name, modules in ROWS.items():
        r = measure(modules, args.repeats)
        print(f"{name:26} {r['wall']:8.2f} {r['cpu']:8.2f} {r['rss_mb']:12.0f}  {'yes' if r['litellm'] else 'no'}")
    print("\ninstalled, not imported on our path (MB on disk):")
    for name in (*LITELLM_ONLY, "openai", "datasets", "pyarrow", "pandas"):
        size = installed_mb(name)
        if size is not None:
            print(f"  {name:20} {size:8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
