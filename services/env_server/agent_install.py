"""How mini-swe-agent gets into the sandbox: AGENT_INSTALL = online | preinstalled | wheelhouse.

Harbor's own `MiniSweAgent.install` (online) apt-installs curl/git/build tools, fetches uv from
astral.sh, runs `uv python install 3.12` and `uv tool install mini-swe-agent`: four trips to the
internet per sandbox. That works on E2B; it does not work in an air-gapped sandbox, and where it works
it is the slowest part of a rollout. Two offline ways, both keeping Harbor's `run()` (the command,
the config flags, the trajectory conversion) and changing only `install()`:

  preinstalled  the task image already has `mini-swe-agent` on PATH (the starter tasks'
                environment/Dockerfile installs mini-swe-agent==2.4.6 into a venv at build time,
                when PyPI is reachable). install() only checks it is there.
  wheelhouse    WHEELHOUSE_DIR (in env-server) holds mini-swe-agent and its dependencies as wheels
                for the sandbox's Python; install() uploads them and installs with --no-index.

The switch is made on OpenEnv's seam table, which is data by design: the mini-swe-agent seam keeps
its env wiring and step limit, and only gains an `import_path` naming the subclass.
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import replace
from pathlib import Path
from typing import Any

from harbor.agents.installed.mini_swe_agent import MiniSweAgent

# The version every test here ran (PINS.md); also what the starter tasks' images install.
MINI_SWE_AGENT_VERSION = "2.4.6"
VENV = "/opt/mini-swe-agent"
# Where the agent's console script lands; Harbor's run() puts ~/.local/bin first, then PATH.
BIN_LINK = "/usr/local/bin/mini-swe-agent"
SANDBOX_WHEELHOUSE = "/tmp/asyncgrpo-wheelhouse"
WHEELHOUSE_DIR = "/wheelhouse"  # overridden from Settings by `apply`

_VERSION_CMD = (
    'py=$(dirname "$(readlink -f "$(command -v mini-swe-agent)")")/python; '
    '"$py" -c \'import minisweagent; print("mini-swe-agent", minisweagent.__version__)\''
)


class PreinstalledMiniSweAgent(MiniSweAgent):
    """mini-swe-agent baked into the task image; nothing is downloaded in the sandbox."""

    async def install(self, environment: Any) -> None:
        result = await environment.exec(command="command -v mini-swe-agent", user="root")
        if result.return_code != 0:
            raise RuntimeError(
                "AGENT_INSTALL=preinstalled but mini-swe-agent is not on PATH in this task's image: add "
                f"`RUN python3 -m venv {VENV} && {VENV}/bin/pip install mini-swe-agent==2.4.6 && "
                f"ln -s {VENV}/bin/mini-swe-agent {BIN_LINK}` to its environment/Dockerfile, or set "
                "AGENT_INSTALL=online (sandbox needs internet) or wheelhouse"
            )

    def get_version_command(self) -> str | None:
        return _VERSION_CMD


class WheelhouseMiniSweAgent(MiniSweAgent):
    """mini-swe-agent installed from wheels that env-server uploads: no network in the sandbox."""

    async def install(self, environment: Any) -> None:
        present = await environment.exec(command="command -v mini-swe-agent", user="root")
        if present.return_code == 0:
            return
        await environment.upload_dir(source_dir=Path(WHEELHOUSE_DIR), target_dir=SANDBOX_WHEELHOUSE)
        version = f"=={self._version}" if self._version else ""
        await self.exec_as_root(
            environment,
            command=(
                f"python3 -m venv {VENV} && "
                f"{VENV}/bin/pip install --no-index --find-links {SANDBOX_WHEELHOUSE} "
                f"{shlex.quote('mini-swe-agent' + version)} && "
                f"ln -sf {VENV}/bin/mini-swe-agent {BIN_LINK} && rm -rf {SANDBOX_WHEELHOUSE}"
            ),
        )

    def get_version_command(self) -> str | None:
        return _VERSION_CMD


CLASSES = {
    "preinstalled": f"{__name__}:PreinstalledMiniSweAgent",
    "wheelhouse": f"{__name__}:WheelhouseMiniSweAgent",
}


def pin_version(environ: Any = os.environ) -> None:
    """Install the tested mini-swe-agent, not the newest: OpenEnv 0.10.0's `build_trial_config`
    (openenv/harbor/rollout.py) passes OPENENV_HARBOR_AGENT_VERSIONS[harness] as Harbor's
    `InstalledAgent(version=...)`, and Harbor's online install then runs `uv tool install mini-swe-agent==<it>`."""
    versions = json.loads(environ.get("OPENENV_HARBOR_AGENT_VERSIONS") or "{}")
    versions["mini-swe-agent"] = MINI_SWE_AGENT_VERSION
    environ["OPENENV_HARBOR_AGENT_VERSIONS"] = json.dumps(versions)


def apply(mode: str, wheelhouse_dir: str = WHEELHOUSE_DIR) -> str:
    """Point OpenEnv's mini-swe-agent seam at the installer for `mode`; returns a report line."""
    global WHEELHOUSE_DIR
    from openenv.harbor import seams

    pin_version()
    if mode == "online":
        return (
            f"agent     mini-swe-agent=={MINI_SWE_AGENT_VERSION} installed by Harbor in each sandbox "
            "(needs internet there)"
        )
    WHEELHOUSE_DIR = wheelhouse_dir
    seams.SEAMS["mini-swe-agent"] = replace(seams.SEAMS["mini-swe-agent"], import_path=CLASSES[mode])
    where = "from the task image" if mode == "preinstalled" else f"from {wheelhouse_dir}"
    return f"agent     mini-swe-agent {where} (AGENT_INSTALL={mode}; no download in the sandbox)"
