"""Preflight refusals no other test triggered, each with its exact one line (the rest of the configuration is
good, so each failure is the only one of its check)."""

import pytest
from support import free_port
from test_checks import GCSFUSE, failures, good_env, probes_for, web  # noqa: F401 -- web is a fixture

from guards.checks import OPT_OUT_PHRASE, run_all


def test_hf_home_unset(tmp_path):
    env = good_env(tmp_path, HF_HOME="")
    assert failures(env, probes_for(tmp_path, GCSFUSE)) == {
        "hf-home": f"HF_HOME is not set: set HF_HOME={env['BUCKET_DIR']}/hf-home so the model cache survives the VM"
    }


def test_ports_that_are_not_ports(tmp_path):
    env = good_env(tmp_path, ENGINE_PORT="0", ENV_SERVER_PORT="http", TUNNEL_METRICS_PORT="70000")
    # One line per port (they were joined with '; '); env-server and tunnel-check read the same fields, and
    # each line is printed once.
    found = [(f.check, f.message) for f in run_all(env, probes_for(tmp_path, GCSFUSE)) if f.check != "weight-transfer"]
    assert found == [
        ("ports", "ENGINE_PORT='0' is not a TCP port: set ENGINE_PORT to a number in 1-65535 (default 8001)"),
        (
            "ports",
            "ENV_SERVER_PORT='http' is not a TCP port: set ENV_SERVER_PORT to a number in 1-65535 (default 8000)",
        ),
        (
            "ports",
            "TUNNEL_METRICS_PORT='70000' is not a TCP port: set TUNNEL_METRICS_PORT to a number in 1-65535 "
            "(default 20241)",
        ),
    ]


def test_negative_gpu_count(tmp_path):
    assert failures(good_env(tmp_path, REQUIRED_GPUS="-1"), probes_for(tmp_path, GCSFUSE)) == {
        "gpus": "REQUIRED_GPUS='-1' is below 0: set it to the GPUs this host must have (2; 1 in the one-GPU form; 0 in the CPU form) "
        "(default 2)"
    }


def test_blank_sandbox_is_the_default_as_everywhere(tmp_path):
    """Blank reads as unset in every shared reader (compose passes `${X:-}` as ""): the default e2b,
    whose key this environment has, exactly as env-server would read it."""
    assert failures(good_env(tmp_path, SANDBOX="  "), probes_for(tmp_path, GCSFUSE)) == {}
    assert failures(good_env(tmp_path, SANDBOX="  ", E2B_API_KEY=""), probes_for(tmp_path, GCSFUSE)) == {
        "sandbox": "SANDBOX=e2b needs E2B_API_KEY: put your key in .env (E2B_API_KEY=e2b_..., from your E2B "
        "dashboard), or use SANDBOX=docker"
    }


def test_unreadable_mountinfo(tmp_path):
    env = good_env(tmp_path)
    probes = probes_for(tmp_path, GCSFUSE)
    probes.mountinfo_path = str(tmp_path / "no-proc" / "mountinfo")
    assert failures(env, probes) == {
        "bucket-mount": f"cannot read {probes.mountinfo_path} (No such file or directory) to inspect "
        f"{env['BUCKET_DIR']}: run on Linux, or set BUCKET_NOT_A_MOUNT_OK={OPT_OUT_PHRASE}"
    }


def test_train_script_override_is_copied_once_and_reused_on_resume(tmp_path):
    from trainer.train_script import materialize, resolve

    script = tmp_path / "mine.py"
    script.write_text("print('first')\n")
    run_dir = tmp_path / "checkpoints" / "run"
    first = materialize(resolve(str(script)), run_dir)
    assert first == run_dir / "train_script.py" and first.read_text() == "print('first')\n"
    # Edited (or a URL that now serves something else) between the start and the resume: the resumed run
    # keeps running the script it started with.
    script.write_text("print('second')\n")
    assert materialize(resolve(str(script)), run_dir).read_text() == "print('first')\n"
    # A new run gets the new script.
    assert materialize(resolve(str(script)), tmp_path / "checkpoints" / "run2").read_text() == "print('second')\n"


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        (
            "{tmp}/none.py",
            "is not a file inside the container: mount it (e.g. under /bucket) and give its "
            "in-container path, or unset TRAIN_SCRIPT",
        ),
        ("{tmp}/bad.py", "is not valid Python (line 1: invalid syntax): fix the script or unset TRAIN_SCRIPT"),
        ("ftp://x/t.py", "has scheme 'ftp': give an in-container path or an http(s) URL"),
        ("{dead}/t.py", "cannot be fetched (ConnectionError): fix the URL or unset TRAIN_SCRIPT"),
        ("{web}/gone.py", "answered HTTP 404: fix the URL (a raw file URL, not a web page) or unset TRAIN_SCRIPT"),
        (
            "{web}/page.html",
            "returned an HTML page, not a Python file: use the raw URL "
            "(e.g. raw.githubusercontent.com/...) or unset TRAIN_SCRIPT",
        ),
    ],
)
def test_a_train_script_that_cannot_run_is_refused_before_the_engine_loads(tmp_path, web, spec, why):  # noqa: F811
    (tmp_path / "bad.py").write_text("def broken(:\n")
    spec = spec.format(tmp=tmp_path, web=web, dead=f"http://127.0.0.1:{free_port()}")
    assert failures(good_env(tmp_path, TRAIN_SCRIPT=spec), probes_for(tmp_path, GCSFUSE)) == {
        "train-script": f"TRAIN_SCRIPT={spec} {why}"
    }
