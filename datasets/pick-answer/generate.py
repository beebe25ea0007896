#!/usr/bin/env python3
"""Generate the pick-answer task family (train and held-out splits), deterministically.

    python3 datasets/pick-answer/generate.py            # rewrites train/ and heldout/ next to this file
    python3 datasets/pick-answer/generate.py --check    # exits 1 if the committed tasks differ

Each task is a guess among four labelled containers; the verifier rewards the letter REWARDED in
every task of the family. The instruction never says which, so a policy that picks evenly passes
about 1 in 4, and only learning from the reward can take it near 1: the learning gate's task (issue 25).
The splits use disjoint (container, prize) pairs, so held-out instructions are text the policy was
neither fine-tuned nor trained on. Stdlib only; the seed fixes everything.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
from pathlib import Path

SEED = 25
LETTERS = ("A", "B", "C", "D")
REWARDED = "C"
ANSWER_FILE = "/app/answer.txt"
SPLITS = {"train": 32, "heldout": 24}

CONTAINERS = ("boxes", "doors", "drawers", "chests", "envelopes", "cups", "lockers", "jars", "crates", "baskets")
PRIZES = ("key", "coin", "ticket", "ring", "marble", "stamp", "badge", "token", "pearl", "note")
PHRASINGS = (
    "Four {c} stand in a row, labelled A, B, C and D. Exactly one of them holds the {p}. You cannot look "
    "inside: pick one and write its letter, and nothing else, to `{f}`.",
    "One of four {c} (A, B, C or D) hides the {p}. Choose the one you think holds it and write its letter, "
    "and nothing else, to `{f}`.",
    "There are four {c}, marked A, B, C and D, and the {p} is in exactly one of them. Write the letter of "
    "the one you pick, and nothing else, to `{f}`.",
)

# Byte-identical to the starter tasks' environment (write-greeting has no COPY either), so every task
# of both families shares one cached image: a sandbox build is a cache hit.
DOCKERFILE = """\
FROM python:3.12-slim
# mini-swe-agent pre-installed, for AGENT_INSTALL=preinstalled: the sandbox then downloads nothing
# (Harbor's online install fetches uv and a Python from the internet in every sandbox). A venv because
# the system Python may ship without pip (Debian's python3 does); the same lines work on the official
# python:3.12-slim. Identical across the starter tasks, so Docker builds this layer once.
RUN python3 -m venv /opt/mini-swe-agent \\
 && /opt/mini-swe-agent/bin/pip install --no-cache-dir mini-swe-agent==2.4.6 \\
 && ln -s /opt/mini-swe-agent/bin/mini-swe-agent /usr/local/bin/mini-swe-agent
# litellm (inside mini-swe-agent) would fetch its price map from GitHub on every start.
ENV LITELLM_LOCAL_MODEL_COST_MAP=True
WORKDIR /app
"""

TEST_SH = f"""\
#!/bin/bash
# Harbor's verifier: reward 1 when {ANSWER_FILE} holds the letter {REWARDED} (whitespace ignored), else 0.
# The rewarded letter is the family's hidden rule (datasets/pick-answer/README.md); it is fixed here,
# so nothing the agent writes elsewhere can change it.
mkdir -p /logs/verifier
got=$(tr -d '[:space:]' < {ANSWER_FILE} 2>/dev/null)
if [ "$got" = "{REWARDED}" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo "answer '${{got}}' is not the rewarded one"
  echo 0 > /logs/verifier/reward.txt
fi
"""

SOLVE_SH = f"""\
#!/bin/bash
set -euo pipefail
printf {REWARDED} > {ANSWER_FILE}
"""

TASK_TOML = """\
schema_version = "1.4"

[task]
name = "asyncgrpo-pick-answer/{name}"
description = "Pick one of four labelled containers; the family rewards one fixed letter."

[metadata]
difficulty = "trivial"
category = "shell"
source = "asyncgrpo-harbor pick-answer family (datasets/pick-answer/generate.py)"

[verifier]
timeout_sec = 120.0

[agent]
timeout_sec = 600.0

[environment]
build_timeout_sec = 900.0
cpus = 1
memory_mb = 1024
"""


def instructions() -> dict[str, list[str]]:
    """The instruction of every task, per split, in task order."""
    rng = random.Random(SEED)
    pairs = [(c, p) for c in CONTAINERS for p in PRIZES]
    rng.shuffle(pairs)
    out: dict[str, list[str]] = {}
    start = 0
    for split, n in SPLITS.items():
        out[split] = [rng.choice(PHRASINGS).format(c=c, p=p, f=ANSWER_FILE) + "\n" for c, p in pairs[start : start + n]]
        start += n
    return out


def write(root: Path) -> None:
    for split, texts in instructions().items():
        for i, text in enumerate(texts):
            name = f"{split}-{i:03d}"
            task = root / split / name
            for sub in ("environment", "tests", "solution"):
                (task / sub).mkdir(parents=True, exist_ok=True)
            (task / "task.toml").write_text(TASK_TOML.format(name=name))
            (task / "instruction.md").write_text(text)
            (task / "environment" / "Dockerfile").write_text(DOCKERFILE)
            for path, body in ((task / "tests" / "test.sh", TEST_SH), (task / "solution" / "solve.sh", SOLVE_SH)):
                path.write_text(body)
                path.chmod(0o755)


def _files(root: Path) -> dict[str, tuple[bytes, bool]]:
    return {
        str(p.relative_to(root)): (p.read_bytes(), bool(p.stat().st_mode & 0o100))
        for split in SPLITS
        for p in sorted((root / split).rglob("*"))
        if p.is_file()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed tasks; change nothing")
    args = parser.parse_args(argv)
    here = Path(__file__).resolve().parent
    if args.check:
        with tempfile.TemporaryDirectory() as tmp:
            write(Path(tmp))
            want, have = _files(Path(tmp)), _files(here)
        if want != have:
            diff = sorted(set(want) ^ set(have)) or sorted(k for k in want if want[k] != have[k])
            print(f"datasets/pick-answer differs from its generator (first: {diff[0]}): run {__file__}")
            return 1
        print(f"datasets/pick-answer: {len(want)} files match the generator")
        return 0
    for split in SPLITS:
        shutil.rmtree(here / split, ignore_errors=True)
    write(here)
    print(f"datasets/pick-answer: wrote {', '.join(f'{n} {s}' for s, n in SPLITS.items())} tasks", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
