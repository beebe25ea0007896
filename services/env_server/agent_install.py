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

Every mode also installs the model layer (`asyncgrpo_chat_model.py`, one file) into the agent's own Python and
names it with mini-swe-agent's `--model-class`: the agent then never imports litellm, whose import was most of
a rollout's CPU (docs/LEARNING.md). The flag goes on the command line, not into the `config` mapping, so
Harbor 0.25.0's `MiniSweAgent.resolve_model_connection_config` still reads the config as a litellm one and
passes the same api_base, timeout, session header and key it passed before.
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

_AGENT_PYTHON = 'py=$(dirname "$(readlink -f "$(command -v mini-swe-agent)")")/python'
_VERSION_CMD = f'{_AGENT_PYTHON}; "$py" -c \'import minisweagent; print("mini-swe-agent", minisweagent.__version__)\''

MODEL_MODULE = Path(__file__).with_name("asyncgrpo_chat_model.py")
MODEL_CLASS = "asyncgrpo_chat_model.CaptureChatModel"
# Exit status of the install command when the task image has no mini-swe-agent (preinstalled mode's refusal).
_NO_AGENT = 3
# The file travels inside the install command, as a quoted here-document (the shell expands nothing in it), not by
# an upload and then a command: each is a round trip per rollout (`docker compose cp` then `exec` on docker, two
# API calls on E2B), and the upload was the costlier one. 16 kB is far below any exec's argument limit (128 kB).
_EOF = "ASYNCGRPO_CHAT_MODEL_EOF"


def install_model_cmd() -> str:
    """Into the site-packages of the Python that runs mini-swe-agent (a venv, or uv's tool venv online), where
    `--model-class` imports it from; a fresh sandbox has no .pyc for it, so Python writes none there either way."""
    source = MODEL_MODULE.read_text()
    if _EOF in source or not source.endswith("\n"):
        raise RuntimeError(f"{MODEL_MODULE.name} must end with a newline and not contain {_EOF}")
    return (
        f"command -v mini-swe-agent >/dev/null || exit {_NO_AGENT}; {_AGENT_PYTHON} && "
        'site=$("$py" -c \'import sysconfig; print(sysconfig.get_paths()["purelib"])\') && '
        f'cat > "$site/{MODEL_MODULE.name}" <<\'{_EOF}\' && chmod 0644 "$site/{MODEL_MODULE.name}"\n{source}{_EOF}\n'
    )


class CaptureModelMixin:
    """The model layer without litellm, for each installer below (Harbor's MiniSweAgent subclasses)."""

    def build_cli_flags(self) -> str:
        # Harbor 0.25.0's MiniSweAgent.run() puts these flags on the mini-swe-agent command line.
        return " ".join(filter(None, (super().build_cli_flags(), f"--model-class {MODEL_CLASS}")))  # type: ignore[misc]

    async def install_chat_model(self, environment: Any, *, user: str | None = "root", prefix: str = "") -> Any:
        return await environment.exec(command=f"set -o pipefail; {prefix}{install_model_cmd()}", user=user)


def _install_failed(result: Any) -> RuntimeError:
    said = " ".join(f"{result.stdout or ''} {result.stderr or ''}".split())[-300:]
    return RuntimeError(
        f"installing the agent's model layer ({MODEL_MODULE.name}) into the sandbox failed (exit "
        f"{result.return_code}: {said or 'no output'}): the sandbox needs a POSIX shell and `install`"
    )


class OnlineMiniSweAgent(CaptureModelMixin, MiniSweAgent):
    """Harbor's own online install (uv, from the internet), then the model layer into uv's tool venv."""

    async def install(self, environment: Any) -> None:
        await super().install(environment)
        # As Harbor installed it: as the agent user, with uv's bin folder on PATH.
        result = await self.install_chat_model(environment, user=None, prefix='export PATH="$HOME/.local/bin:$PATH"; ')
        if result.return_code != 0:
            raise _install_failed(result)


class PreinstalledMiniSweAgent(CaptureModelMixin, MiniSweAgent):
    """mini-swe-agent baked into the task image; nothing is downloaded in the sandbox."""

    async def install(self, environment: Any) -> None:
        result = await self.install_chat_model(environment)
        if result.return_code == _NO_AGENT:
            raise RuntimeError(
                "AGENT_INSTALL=preinstalled but mini-swe-agent is not on PATH in this task's image: add "
                f"`RUN python3 -m venv {VENV} && {VENV}/bin/pip install mini-swe-agent==2.4.6 && "
                f"ln -s {VENV}/bin/mini-swe-agent {BIN_LINK}` to its environment/Dockerfile, or set "
                "AGENT_INSTALL=online (sandbox needs internet) or wheelhouse"
            )
        if result.return_code != 0:
            raise _install_failed(result)

    def get_version_command(self) -> str | None:
        return _VERSION_CMD


class WheelhouseMiniSweAgent(CaptureModelMixin, MiniSweAgent):
    """mini-swe-agent installed from wheels that env-server uploads: no network in the sandbox."""

    async def install(self, environment: Any) -> None:
        present = await self.install_chat_model(environment)
        if present.return_code == 0:
            return
        if present.return_code != _NO_AGENT:
            raise _install_failed(present)
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
        installed = await self.install_chat_model(environment)
        if installed.return_code != 0:
            raise _install_failed(installed)

    def get_version_command(self) -> str | None:
        return _VERSION_CMD


CLASSES = {
    "online": f"{__name__}:OnlineMiniSweAgent",
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
    seams.SEAMS["mini-swe-agent"] = replace(seams.SEAMS["mini-swe-agent"], import_path=CLASSES[mode])
    if mode == "online":
        return (
            f"agent     mini-swe-agent=={MINI_SWE_AGENT_VERSION} installed by Harbor in each sandbox "
            f"(needs internet there); model layer {MODEL_CLASS}"
        )
    WHEELHOUSE_DIR = wheelhouse_dir
    where = "from the task image" if mode == "preinstalled" else f"from {wheelhouse_dir}"
    return (
        f"agent     mini-swe-agent {where} (AGENT_INSTALL={mode}; no download in the sandbox); "
        f"model layer {MODEL_CLASS}"
    )
