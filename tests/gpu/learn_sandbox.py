"""A rollout's own /app, /logs and /tests on a machine without Docker (stdlib only: unit-tested on the CPU host).

The pick-answer policy writes its answer to the absolute path `/app/answer.txt`, and the family's verifier
(`tests/test.sh`) reads it there and writes `/logs/verifier/reward.txt`, as in a Harbor sandbox. Rollouts run
concurrently, so each needs its own /app: each runs in a private mount namespace (`unshare --mount`, root)
where /app, /logs and /tests are bind mounts of this rollout's own fresh folders. The agent (mini-swe-agent with
its local environment, cwd /app) and then the verifier run inside it, in that order, as Harbor runs them in a
sandbox; the rest of the file system is the host's. That keeps what the reward depends on faithful (the paths,
the fresh /app per attempt, the verifier's own script and its reward file); it is NOT an isolation boundary
(the agent's commands run as root on the host), which the known, tiny policy of this test does not need.
"""

from __future__ import annotations

import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

MOUNTS = ("/app", "/logs", "/tests")
# Inside the namespace: $1..$3 the rollout's folders, $4 the agent's limit in seconds, then the agent's argv.
# The verifier runs whatever the agent did (a timed-out agent is scored on what it wrote, as Harbor does).
NAMESPACE_SCRIPT = (
    "set -e; "
    'mount --bind "$1" /app; mount --bind "$2" /logs; mount --bind "$3" /tests; '
    "limit=$4; shift 4; cd /app; set +e; "
    'timeout -k 5 "$limit" "$@" > /logs/agent/agent.txt 2>&1; echo $? > /logs/agent/exit_code.txt; '
    "bash /tests/test.sh > /logs/verifier/test-stdout.txt 2>&1; echo $? > /logs/verifier/exit_code.txt"
)


@dataclass(frozen=True)
class Sandbox:
    root: Path
    app: Path
    logs: Path
    tests: Path

    @property
    def reward_file(self) -> Path:
        return self.logs / "verifier" / "reward.txt"


def make_sandbox(work_root: Path, task_dir: Path, name: str = "") -> Sandbox:
    """Fresh folders for one rollout under `work_root`: an empty app/, logs/{agent,verifier}/ and a copy of the
    task's tests/ (never the task folder itself: a rollout must not be able to change the verifier of the next)."""
    root = Path(work_root) / (name or uuid.uuid4().hex[:12])
    root.mkdir(parents=True, exist_ok=False)
    sandbox = Sandbox(root=root, app=root / "app", logs=root / "logs", tests=root / "tests")
    sandbox.app.mkdir()
    (sandbox.logs / "agent").mkdir(parents=True)
    (sandbox.logs / "verifier").mkdir()
    shutil.copytree(Path(task_dir) / "tests", sandbox.tests)
    return sandbox


def namespace_argv(sandbox: Sandbox, agent_argv: list[str], agent_timeout_s: float) -> list[str]:
    """The command that runs `agent_argv` and then the verifier in a private mount namespace over `sandbox`."""
    return [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "--",
        "sh",
        "-c",
        NAMESPACE_SCRIPT,
        "learn-sandbox",
        str(sandbox.app),
        str(sandbox.logs),
        str(sandbox.tests),
        str(max(1, int(agent_timeout_s))),
        *agent_argv,
    ]


def read_reward(sandbox: Sandbox) -> float | None:
    """The verifier's reward, or None when it wrote none or something unreadable (unscorable, never a 0)."""
    try:
        return float(sandbox.reward_file.read_text().strip())
    except (OSError, ValueError):
        return None


def tail(path: Path, chars: int = 600) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return ""
