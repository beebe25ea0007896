"""AGENT_INSTALL=preinstalled against Harbor 0.25.0 and OpenEnv 0.10.0 themselves: the agent Harbor builds from
OpenEnv's trial config for a rollout is ours, a task image without mini-swe-agent on PATH fails its install
with one line naming the Dockerfile line to add (or the other modes), and a task image with it gets the model
layer without litellm (env_server/asyncgrpo_chat_model.py) installed into the agent's own Python, which Harbor's
command line then names with `--model-class`.

The sandbox is a shell on this container (a real `bash -c`, with the PATH a task image would have): Harbor's
docker sandbox needs a task image built for the purpose, and `install()` asks the sandbox for one command (the
model layer travels inside it: no upload, one round trip a rollout fewer). tests/integration/env_server runs the full rollout in a real docker sandbox.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from harbor.agents.factory import AgentFactory
from harbor.environments.base import ExecResult
from harbor.models.agent.context import AgentContext
from openenv.harbor import seams
from openenv.harbor.rollout import build_trial_config

from env_server import agent_install

BASH = shutil.which("bash")
STARTER_TASK = Path(__file__).resolve().parents[3] / "datasets" / "starter" / "count-lines"
MISSING = (
    "AGENT_INSTALL=preinstalled but mini-swe-agent is not on PATH in this task's image: add "
    "`RUN python3 -m venv /opt/mini-swe-agent && /opt/mini-swe-agent/bin/pip install mini-swe-agent==2.4.6 && "
    "ln -s /opt/mini-swe-agent/bin/mini-swe-agent /usr/local/bin/mini-swe-agent` to its environment/Dockerfile, "
    "or set AGENT_INSTALL=online (sandbox needs internet) or wheelhouse"
)


class ShellSandbox:
    """Runs the agent's install commands in a real shell whose PATH is the task image's."""

    def __init__(self, path: Path, run: bool = True):
        self.path = path
        self.run = run
        self.commands: list[str] = []
        self.uploads: list[tuple[Path, str]] = []

    async def upload_file(self, source_path, target_path: str) -> None:
        self.uploads.append((Path(source_path), target_path))
        shutil.copy(source_path, target_path)

    async def exec(self, command: str, cwd=None, env=None, timeout_sec=None, user=None) -> ExecResult:
        self.commands.append(command)
        if not self.run:
            return ExecResult(stdout="", stderr="", return_code=0)
        proc = await asyncio.create_subprocess_exec(
            BASH,  # by its full path: the child's PATH is the task image's, which has no bash in it
            "-c",
            command,
            env={"PATH": str(self.path)},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await proc.communicate()
        return ExecResult(stdout=out.decode(), stderr=err.decode(), return_code=proc.returncode)


@pytest.fixture
def agent(monkeypatch, tmp_path):
    """The agent Harbor constructs for a preinstalled-mode rollout, from OpenEnv's own trial config."""
    monkeypatch.setitem(seams.SEAMS, "mini-swe-agent", seams.SEAMS["mini-swe-agent"])  # restored after
    monkeypatch.setenv("OPENENV_HARBOR_AGENT_VERSIONS", os.environ.get("OPENENV_HARBOR_AGENT_VERSIONS", "{}"))
    line = agent_install.apply("preinstalled")
    assert line == (
        "agent     mini-swe-agent from the task image (AGENT_INSTALL=preinstalled; no download in the sandbox); "
        "model layer asyncgrpo_chat_model.CaptureChatModel"
    )
    config = build_trial_config(
        task_dir=STARTER_TASK,
        harness="mini-swe-agent",
        sandbox="docker",
        intercept_url="http://127.0.0.1:1/v1",
        session_id="s",
        model="tiny",
        trial_name="t",
        trials_dir=tmp_path / "trials",
        agent_step_limit=4,
    )
    built = AgentFactory.create_agent_from_config(config.agent, logs_dir=tmp_path / "logs")
    assert type(built) is agent_install.PreinstalledMiniSweAgent
    return built


INSTALL = "set -o pipefail; " + agent_install.install_model_cmd()


def test_a_task_image_without_the_agent_fails_its_install_with_one_line(agent, tmp_path):
    bare = tmp_path / "bin"
    bare.mkdir()
    sandbox = ShellSandbox(bare)
    with pytest.raises(RuntimeError) as err:
        asyncio.run(agent.install(sandbox))
    assert str(err.value) == MISSING
    assert sandbox.commands == [INSTALL]  # nothing was downloaded or installed


def test_a_task_image_with_the_agent_gets_the_model_layer_in_the_agents_python(agent, tmp_path):
    """As the starter tasks' Dockerfiles lay it out: a venv, its console script, a link on PATH."""
    venv = tmp_path / "opt" / "mini-swe-agent"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    exe = venv / "bin" / "mini-swe-agent"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    on_path = tmp_path / "usr-local-bin"
    on_path.mkdir()
    (on_path / "mini-swe-agent").symlink_to(exe)
    sandbox = ShellSandbox(Path(f"{on_path}:/usr/bin:/bin"))
    asyncio.run(agent.install(sandbox))
    assert sandbox.commands == [INSTALL]
    assert sandbox.uploads == []
    purelib = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    installed = Path(purelib) / "asyncgrpo_chat_model.py"
    assert installed.read_bytes() == agent_install.MODEL_MODULE.read_bytes()
    assert oct(installed.stat().st_mode & 0o777) == "0o644", oct(installed.stat().st_mode)


def test_harbors_command_line_names_our_model_class_and_keeps_the_litellm_wiring(agent, tmp_path):
    """Harbor's own run(): the flag is added, and what Harbor passes for a litellm config is still passed (the
    class reads the same api_base, timeout and session header litellm read)."""
    sandbox = ShellSandbox(tmp_path, run=False)
    asyncio.run(agent.run("Count the lines.", sandbox, AgentContext()))
    (command,) = [c for c in sandbox.commands if "mini-swe-agent --yolo" in c]
    assert "--cost-limit 0 --model-class asyncgrpo_chat_model.CaptureChatModel " in command
    assert "-c mini -c model.model_kwargs.timeout=3600 " in command
    assert "--model=openai/tiny " in command
