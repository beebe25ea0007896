"""The trainer image's form is a build argument, and a base that does not fit it fails the build itself.

Real `docker build`s of images/trainer/Dockerfile against small bases made here from the locally built
Debian base (scripts/build-base-images; there is no registry): one without vllm, and ones that carry a
stand-in `vllm` package (an empty module: select-python only has to find which interpreter carries it).
Every build that must fail stops in select-python, before anything is installed, so the suite takes
seconds and needs no network.

Runs on the host (scripts/test, after the CPU-form images are built):
    .venv/bin/python -m pytest tests/integration/trainer_image
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
from support import docker_missing

REPO = Path(__file__).resolve().parents[3]
BASE = os.environ.get("TRAINER_FORM_TEST_BASE", "asyncgrpo-harbor/debian-trixie-python:local")
TAG = f"asyncgrpo-test/trainer-form-{uuid.uuid4().hex[:8]}"
BUILD_TIMEOUT_S = 300

# The stand-in vllm, in a venv outside /opt/venv (found through PATH, as a base that activates its venv)
# or in the system Python's site-packages (as older vLLM images kept it).
VLLM_IN_VENV = """
RUN python3 -m venv --without-pip /srv/vllm-env && \\
    d=$(/srv/vllm-env/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') && \\
    mkdir -p "$d/vllm" && touch "$d/vllm/__init__.py"
ENV PATH=/srv/vllm-env/bin:$PATH
"""
VLLM_IN_SYSTEM = """
RUN d=$(python3 -c 'import site; print(site.getsitepackages()[0])') && \\
    mkdir -p "$d/vllm" && touch "$d/vllm/__init__.py"
"""


def _docker_ready() -> str:
    if shutil.which("docker") is None:
        return "no docker CLI"
    if subprocess.run(["docker", "info"], capture_output=True, check=False).returncode != 0:
        return "no Docker daemon answers"
    if subprocess.run(["docker", "image", "inspect", BASE], capture_output=True, check=False).returncode != 0:
        return f"the base {BASE} is missing: scripts/build-base-images makes it"
    return ""


@pytest.fixture(scope="module", autouse=True)
def docker():
    why = _docker_ready()
    if why:
        docker_missing(why)
    yield
    tags = subprocess.run(
        ["docker", "image", "ls", "--format", "{{.Repository}}:{{.Tag}}", TAG], capture_output=True, text=True
    ).stdout.split()
    if tags:
        subprocess.run(["docker", "image", "rm", "-f", *tags], capture_output=True, check=False)


def build(*args: str, context: Path = REPO) -> subprocess.CompletedProcess:
    # --force-rm: a failed RUN leaves no container behind on the host's daemon.
    cmd = ["docker", "build", "--force-rm", *args, str(context)]
    return subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
        check=False,
    )


def base_with(tmp_path: Path, name: str, steps: str) -> str:
    """A small base: the local Debian base plus `steps`, tagged for this run only."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "Dockerfile").write_text(f"FROM {BASE}\n{steps}")
    tag = f"{TAG}:{name}"
    out = build("-t", tag, context=tmp_path)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return tag


def trainer_build(base: str, form: str) -> subprocess.CompletedProcess:
    return build(
        "-f",
        str(REPO / "images/trainer/Dockerfile"),
        "--build-arg",
        f"BASE_IMAGE={base}",
        "--build-arg",
        f"TRAINER_FORM={form}",
        "-t",
        f"{TAG}:trainer-{form}",
    )


def error_line(out: subprocess.CompletedProcess) -> str:
    # The classic builder prints a RUN's output as is; BuildKit prefixes each line ("#8 0.21 ...").
    lines = [line[line.index("select-python: ") :] for line in output(out).splitlines() if "select-python: " in line]
    assert lines, f"the build did not stop in select-python:\n{output(out)[-4000:]}"
    return lines[-1]


def output(out: subprocess.CompletedProcess) -> str:
    return out.stdout + out.stderr


def test_gpu_form_on_a_base_without_vllm_fails_the_build_naming_the_fix():
    out = trainer_build(BASE, "gpu")
    assert out.returncode != 0, "the GPU form built on a base without vllm"
    line = error_line(out)
    assert line.startswith(f"select-python: TRAINER_FORM=gpu but no Python in {BASE} can import vllm (tried: ")
    # The fix: the vLLM base, or the CPU form by name.
    assert "vllm/vllm-openai" in line and "--build-arg TRAINER_FORM=cpu" in line, line
    assert "/usr/bin/python3" in line, f"the error should list the interpreters it tried: {line}"


def test_an_unknown_form_fails_the_build():
    out = trainer_build(BASE, "tpu")
    assert out.returncode != 0
    line = error_line(out)
    assert line.startswith("select-python: TRAINER_FORM='tpu' is not a trainer form"), line
    assert "TRAINER_FORM=gpu" in line and "TRAINER_FORM=cpu" in line, line


def test_cpu_form_never_installs_over_a_base_that_has_vllm(tmp_path):
    base = base_with(tmp_path, "vllm-in-venv", VLLM_IN_VENV)
    out = trainer_build(base, "cpu")
    assert out.returncode != 0, "the CPU form would install CPU torch into a base with vllm"
    line = error_line(out)
    assert line.startswith(f"select-python: TRAINER_FORM=cpu but /srv/vllm-env/bin/python3 in {base} imports vllm"), (
        line
    )
    assert "TRAINER_FORM=gpu" in line, line


@pytest.mark.parametrize(
    ("name", "steps", "where"),
    [
        ("vllm-in-venv", VLLM_IN_VENV, "/srv/vllm-env/bin/python3"),
        ("vllm-in-system", VLLM_IN_SYSTEM, "/usr/bin/python3"),
    ],
)
def test_gpu_form_finds_vllm_wherever_the_base_keeps_it(tmp_path, name, steps, where):
    """Past select-python the image installs into /opt/venv and runs `python` from PATH: both must be the
    interpreter that carries vllm (the trainer image's own steps, without its network install)."""
    base = base_with(tmp_path / "base", name, steps)
    ctx = tmp_path / "check"
    ctx.mkdir()
    shutil.copy(REPO / "images/trainer/select-python", ctx / "select-python")
    (ctx / "Dockerfile").write_text(
        f"FROM {base}\n"
        "ENV PATH=/opt/venv/bin:$PATH\n"
        "COPY select-python /usr/local/bin/\n"
        "RUN select-python gpu && /opt/venv/bin/python -c 'import vllm' && python -c 'import vllm'\n"
    )
    out = build("--no-cache", "-t", f"{TAG}:{name}-checked", context=ctx)
    assert out.returncode == 0, output(out)[-3000:]
    assert f"select-python: gpu form, vllm found by {where}" in output(out), output(out)[-3000:]
