"""Every guard triggered for real, with its message checked (host venv, no Docker, no GPU).

The mountinfo lines are copied from real containers on this host (`docker run -v /tmp/x:/bucket ...`,
`--tmpfs /bucket`) and from a gcsfuse bucket bound the way compose does it.
"""

import http.server
import socket
import threading

import pytest
from support import free_port, free_ports

from guards.checks import OPT_OUT_PHRASE, Probes, run_all
from stack.facts import DEFAULT_PORTS

HOSTNAME_LINE = (
    "117 51 254:0 /var/lib/docker/containers/1c4b/hostname /etc/hostname rw,relatime - ext4 /dev/vda rw,discard\n"
)
PLAIN_FOLDER = "114 51 254:0 /tmp/plainbucket /bucket rw,relatime - ext4 /dev/vda rw,discard\n" + HOSTNAME_LINE
GCSFUSE = "120 51 0:61 / /bucket rw,nosuid,nodev,relatime - fuse.gcsfuse my-bucket rw,user_id=0\n" + HOSTNAME_LINE
DISK_ROOT = "121 51 8:17 / /bucket rw,relatime - xfs /dev/sdb1 rw\n" + HOSTNAME_LINE
TMPFS = "122 51 0:70 / /bucket rw,nosuid,nodev - tmpfs tmpfs rw\n" + HOSTNAME_LINE
NOTHING = HOSTNAME_LINE


def good_env(tmp_path, **over):
    bucket = tmp_path / "bucket"
    bucket.mkdir(exist_ok=True)
    env = {
        "BUCKET_DIR": str(bucket),
        "HF_HOME": str(bucket / "hf-home"),
        "REQUIRED_GPUS": "2",
        "SANDBOX": "e2b",
        "E2B_API_KEY": "e2b_test",
        "TUNNEL_PROVIDER": "cloudflared",
        "COMPOSE_PROFILES": "cloudflared",
        "MODEL": "Qwen/Qwen3-1.7B",
        "DATASETS": "/app/datasets/starter",
        "MIN_FREE_DISK_GB": "0",
        "AGENT_STEP_LIMIT": "12",
        "WEIGHT_TRANSFER": "nccl",
        # The trials folder's disk is checked for TRIALS_MAX_GB (guards trials-disk): a folder of the test's own,
        # and a cap any machine that runs the tests has free.
        "TRIALS_DIR": str(tmp_path / "trials"),
        "TRIALS_MAX_GB": "1",
    }
    for name, port in zip(DEFAULT_PORTS, free_ports(4), strict=True):
        env[name] = str(port)
    env.update(over)
    return env


def probes_for(tmp_path, mount_text, gpus=2):
    info = tmp_path / "mountinfo"
    info.write_text(mount_text.replace(" /bucket ", f" {tmp_path / 'bucket'} "))
    # The model's size is unknown to these tests (no Hub here); test_run_settings.py sizes it.
    return Probes(
        mountinfo_path=str(info), gpu_count=lambda: (gpus, "test counter"), model_size=lambda model, hf_home: None
    )


def failures(env, probes, phase="preflight"):
    # weight-transfer depends on the image (vllm / mock_engine); it has its own tests below.
    return {f.check: f.message for f in run_all(env, probes, phase) if f.check != "weight-transfer"}


def test_a_good_configuration_passes(tmp_path):
    assert failures(good_env(tmp_path), probes_for(tmp_path, GCSFUSE)) == {}


def test_all_failures_are_reported_together(tmp_path):
    env = good_env(tmp_path, E2B_API_KEY="", MODEL="", COMPOSE_PROFILES="")
    found = failures(env, probes_for(tmp_path, PLAIN_FOLDER, gpus=1))
    assert set(found) == {"gpus", "bucket-mount", "sandbox", "tunnel"}


def test_gpu_count(tmp_path):
    msg = failures(good_env(tmp_path), probes_for(tmp_path, GCSFUSE, gpus=1))["gpus"]
    assert "found 1 GPU(s)" in msg and "REQUIRED_GPUS=2" in msg and "REQUIRED_GPUS=0" in msg


def test_the_trainer_does_not_count_the_hosts_gpus(tmp_path):
    # compose gives the trainer REQUIRED_GPUS=2 (the shared guard env) but reserves it one GPU: the
    # host count is preflight's alone, or every real run stops at the trainer's own guard pass.
    assert failures(good_env(tmp_path), probes_for(tmp_path, GCSFUSE, gpus=1), phase="trainer") == {}


def test_gpu_count_real_probe_on_this_gpu_less_host(tmp_path):
    # No probe injected: nvidia-smi/torch are really asked, and this host has no GPU.
    probes = probes_for(tmp_path, GCSFUSE)
    probes.gpu_count = None
    assert "found 0 GPU(s)" in failures(good_env(tmp_path), probes)["gpus"]


def test_cpu_form_needs_no_gpu(tmp_path):
    assert "gpus" not in failures(good_env(tmp_path, REQUIRED_GPUS="0"), probes_for(tmp_path, GCSFUSE, gpus=0))


def test_bucket_that_docker_created_as_an_empty_folder(tmp_path):
    msg = failures(good_env(tmp_path), probes_for(tmp_path, PLAIN_FOLDER))["bucket-mount"]
    assert "not a real mount" in msg and "/tmp/plainbucket" in msg and "root filesystem" in msg
    assert "BUCKET_PATH" in msg and OPT_OUT_PHRASE in msg


@pytest.mark.parametrize("text", [NOTHING, TMPFS])
def test_bucket_not_bound_or_in_memory(tmp_path, text):
    assert "not a real mount" in failures(good_env(tmp_path), probes_for(tmp_path, text))["bucket-mount"]


@pytest.mark.parametrize("text", [GCSFUSE, DISK_ROOT])
def test_real_buckets_pass(tmp_path, text):
    assert "bucket-mount" not in failures(good_env(tmp_path), probes_for(tmp_path, text))


def test_opt_out_needs_the_exact_phrase(tmp_path):
    probes = probes_for(tmp_path, PLAIN_FOLDER)
    msg = failures(good_env(tmp_path, BUCKET_NOT_A_MOUNT_OK="yes"), probes)["bucket-mount"]
    assert "'yes' is not the opt-out phrase" in msg and OPT_OUT_PHRASE in msg
    assert "bucket-mount" not in failures(good_env(tmp_path, BUCKET_NOT_A_MOUNT_OK=OPT_OUT_PHRASE), probes)


def test_bucket_not_writable(tmp_path):
    # /proc/self is a directory nobody may create files in, root included (these tests may run as root,
    # for whom chmod does not bite).
    msg = failures(good_env(tmp_path, BUCKET_DIR="/proc/self"), probes_for(tmp_path, GCSFUSE))["bucket-writable"]
    assert "not writable" in msg and "chown" in msg


def test_bucket_missing(tmp_path):
    msg = failures(good_env(tmp_path, BUCKET_DIR=str(tmp_path / "none")), probes_for(tmp_path, GCSFUSE))
    assert "does not exist in the container" in msg["bucket-writable"]


def test_hf_home_off_the_bucket(tmp_path):
    msg = failures(good_env(tmp_path, HF_HOME="/root/.cache/huggingface"), probes_for(tmp_path, GCSFUSE))["hf-home"]
    assert "not on the bucket" in msg and "hf-home" in msg


def test_checkpoints_off_the_bucket(tmp_path):
    msg = failures(good_env(tmp_path, CHECKPOINT_ROOT="/tmp/ckpt"), probes_for(tmp_path, GCSFUSE))["checkpoints"]
    assert "not on the bucket" in msg


def test_e2b_without_key(tmp_path):
    msg = failures(good_env(tmp_path, E2B_API_KEY=""), probes_for(tmp_path, GCSFUSE))["sandbox"]
    assert "E2B_API_KEY" in msg and "SANDBOX=docker" in msg


def test_docker_sandbox_without_socket(tmp_path):
    probes = probes_for(tmp_path, GCSFUSE)
    probes.docker_socket = str(tmp_path / "no.sock")
    msg = failures(good_env(tmp_path, SANDBOX="docker"), probes)["sandbox"]
    assert "docker.sock" in msg


def test_docker_sandbox_with_a_real_socket(tmp_path):
    path = tmp_path / "d.sock"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(path))
        probes = probes_for(tmp_path, GCSFUSE)
        probes.docker_socket = str(path)
        assert "sandbox" not in failures(good_env(tmp_path, SANDBOX="docker"), probes)


def test_the_trainer_leaves_sandbox_credentials_to_preflight(tmp_path):
    """The env server starts sandboxes, so only it (and preflight) holds the E2B key or the docker
    socket; the trainer must not demand them (it did, and stopped the CPU form at its first start)."""
    env = good_env(tmp_path, SANDBOX="docker")
    probes = probes_for(tmp_path, GCSFUSE)
    probes.docker_socket = str(tmp_path / "absent.sock")
    assert "sandbox" in failures(env, probes)
    assert "sandbox" not in failures(env, probes, phase="trainer")


def test_port_in_use(tmp_path):
    env = good_env(tmp_path)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", int(env["CAPTURE_PORT"])))
        holder.listen()
        msg = failures(env, probes_for(tmp_path, GCSFUSE))["ports"]
        assert f"port {env['CAPTURE_PORT']} (CAPTURE_PORT) is already in use" in msg
        # The trainer runs after the stack holds its ports: it skips this check.
        assert "ports" not in failures(env, probes_for(tmp_path, GCSFUSE), phase="trainer")


def test_two_services_on_one_port(tmp_path):
    env = good_env(tmp_path)
    env["ENGINE_PORT"] = env["CAPTURE_PORT"]
    assert "both" in failures(env, probes_for(tmp_path, GCSFUSE))["ports"]


def test_an_empty_model_or_dataset_is_the_one_default_everywhere(tmp_path):
    """compose passes MODEL and DATASETS through empty when unset: every reader takes the field's default
    (there is no service that would start with an empty model for preflight to refuse)."""
    from stack.readers import trainer as config
    from stack.readers.env_server import Settings

    empty = {"MODEL": "", "DATASETS": ""}
    assert config.from_env(empty).model == Settings.from_env(empty).model == "Qwen/Qwen3-1.7B"
    assert config.from_env(empty).datasets == Settings.from_env(empty).datasets == ("/app/datasets/starter",)
    assert failures(good_env(tmp_path, **empty), probes_for(tmp_path, GCSFUSE)) == {}


def test_a_blank_model_or_dataset_is_refused_not_read_as_the_default(tmp_path):
    """A value that is there and says nothing (blanks; for DATASETS only commas) is a slip, not "the default"."""
    found = [
        f.message
        for f in run_all(good_env(tmp_path, MODEL="  ", DATASETS=" , "), probes_for(tmp_path, GCSFUSE))
        if f.check != "weight-transfer"
    ]
    assert found == [
        "MODEL='  ' says nothing: set MODEL to a value, or leave it empty for the default (Qwen/Qwen3-1.7B)",
        "DATASETS=' , ' says nothing: set DATASETS to a value, or leave it empty for the default "
        "(/app/datasets/starter)",
    ]


def test_disk_space(tmp_path):
    msg = failures(good_env(tmp_path, MIN_FREE_DISK_GB="100000"), probes_for(tmp_path, GCSFUSE))["disk"]
    assert "need 100000.0 GB: MIN_FREE_DISK_GB=100000 (the size of Qwen/Qwen3-1.7B is unknown here" in msg


@pytest.mark.parametrize(
    ("provider", "profiles", "needle"),
    [
        ("cloudflared", "", "does not contain cloudflared"),
        ("direct", "cloudflared", "remove cloudflared"),
        ("gradio", "x,cloudflared", "remove cloudflared"),
        (
            "ngrok",
            "",
            "TUNNEL_PROVIDER='ngrok' is not allowed: set TUNNEL_PROVIDER to one of: cloudflared (a quick tunnel, or a "
            "named one with TUNNEL_TOKEN + TUNNEL_HOSTNAME), gradio (OpenEnv's share link), direct (DIRECT_URL the "
            "sandbox can already route to) (default cloudflared)",
        ),
    ],
)
def test_tunnel_profile(tmp_path, provider, profiles, needle):
    env = good_env(tmp_path, TUNNEL_PROVIDER=provider, COMPOSE_PROFILES=profiles)
    assert needle in failures(env, probes_for(tmp_path, GCSFUSE))["tunnel"]


def test_direct_without_tunnel_profile_passes(tmp_path):
    env = good_env(tmp_path, TUNNEL_PROVIDER="direct", COMPOSE_PROFILES="")
    assert "tunnel" not in failures(env, probes_for(tmp_path, GCSFUSE))


@pytest.mark.parametrize(
    ("value", "start"),
    [
        (
            "0",
            "AGENT_STEP_LIMIT='0' is below 1: set a positive number of model calls; 0 or less would leave rollouts unbounded",
        ),
        ("-3", "AGENT_STEP_LIMIT='-3' is below 1: set a positive number of model calls"),
        ("many", "AGENT_STEP_LIMIT='many' is not a whole number: set a positive number of model calls"),
    ],
)
def test_step_limit_never_silently_unlimited(tmp_path, value, start):
    msg = failures(good_env(tmp_path, AGENT_STEP_LIMIT=value), probes_for(tmp_path, GCSFUSE))["trainer-settings"]
    assert msg.startswith(start) and msg.endswith("(default 12)") and "grows with every turn" in msg


def test_sandbox_values_are_the_env_servers(tmp_path):
    """Preflight refuses exactly what env-server would refuse at start (SANDBOX=modal, say)."""
    from stack.readers.env_server import EnvError, Settings

    msg = failures(good_env(tmp_path, SANDBOX="modal"), probes_for(tmp_path, GCSFUSE))["sandbox"]
    with pytest.raises(EnvError) as refused:
        Settings.from_env({"SANDBOX": "modal"})
    assert msg == str(refused.value)
    assert msg.startswith("SANDBOX='modal' is not allowed")


def test_bad_port_values_are_all_reported(tmp_path):
    env = good_env(tmp_path, ENGINE_PORT="x", CAPTURE_PORT="70000")
    found = [f.message for f in run_all(env, probes_for(tmp_path, GCSFUSE)) if f.check == "ports"]
    assert found == [
        "ENGINE_PORT='x' is not a TCP port: set ENGINE_PORT to a number in 1-65535 (default 8001)",
        "CAPTURE_PORT='70000' is not a TCP port: set CAPTURE_PORT to a number in 1-65535 (default 8100)",
    ]


def test_bad_run_name(tmp_path):
    # The trainer's own reader refuses it too (stack/readers/trainer.py), with the same line: printed once.
    found = failures(good_env(tmp_path, RUN_NAME="../etc"), probes_for(tmp_path, GCSFUSE))
    assert list(found.values()) == [
        "RUN_NAME='../etc' is not a usable folder name: use letters, digits, '.', '_' and '-', starting with a "
        "letter or digit, at most 128 characters (no '/', no '..'), or leave it empty for a fresh name"
    ]


@pytest.fixture
def web(tmp_path):
    (tmp_path / "www").mkdir()
    (tmp_path / "www" / "train.py").write_text("print('custom trainer')\n")
    (tmp_path / "www" / "page.html").write_text("<!DOCTYPE html><html></html>")

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **kw):
            super().__init__(*a, directory=str(tmp_path / "www"), **kw)

        def log_message(self, *a):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.mark.parametrize(
    ("path", "needle"), [("/gone.py", "HTTP 404"), ("/page.html", "HTML page"), ("/train.py", None)]
)
def test_train_script_url(tmp_path, web, path, needle):
    found = failures(good_env(tmp_path, TRAIN_SCRIPT=web + path), probes_for(tmp_path, GCSFUSE))
    if needle is None:
        assert "train-script" not in found
    else:
        assert needle in found["train-script"] and "unset TRAIN_SCRIPT" in found["train-script"]


def test_train_script_unreachable_fails_fast(tmp_path):
    port = free_port()
    msg = failures(good_env(tmp_path, TRAIN_SCRIPT=f"http://127.0.0.1:{port}/t.py"), probes_for(tmp_path, GCSFUSE))
    assert "cannot be fetched" in msg["train-script"]


def test_train_script_path(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def broken(:\n")
    probes = probes_for(tmp_path, GCSFUSE)
    assert "not valid Python (line 1" in failures(good_env(tmp_path, TRAIN_SCRIPT=str(bad)), probes)["train-script"]
    missing = failures(good_env(tmp_path, TRAIN_SCRIPT=str(tmp_path / "none.py")), probes)["train-script"]
    assert "not a file inside the container" in missing
    assert "scheme 'ftp'" in failures(good_env(tmp_path, TRAIN_SCRIPT="ftp://x/t.py"), probes)["train-script"]


def test_weight_transfer_modes(tmp_path):
    probes = probes_for(tmp_path, GCSFUSE)

    def by(mode):
        return {f.check: f.message for f in run_all(good_env(tmp_path, WEIGHT_TRANSFER=mode), probes)}

    assert (
        "WEIGHT_TRANSFER='gloo' is not allowed: set WEIGHT_TRANSFER to one of: nccl (vLLM's NCCL weight transfer, "
        "GPU), ipc (vLLM's CUDA-IPC weight transfer, engine and trainer on one GPU), mock (the mock engine's HTTP "
        "backend, the CPU form) (default nccl)" in by("gloo")["trainer-settings"]
    )
    # No vllm in the host venv: nccl names the image to build from. The mock engine's backend is in
    # this checkout (services/mock_engine/weight_client.py), so mock passes.
    assert by("nccl")["weight-transfer"] == (
        "WEIGHT_TRANSFER=nccl needs vllm in the trainer image: build the trainer image FROM the vLLM image; the "
        "CPU form sets WEIGHT_TRANSFER=mock"
    )
    assert "weight-transfer" not in by("mock")


def test_preflight_command_lists_every_problem(tmp_path):
    import os
    import subprocess
    import sys

    # Only what this test sets (not the caller's environment), its own free ports and no GPU or vllm demand, so
    # the list of problems is known exactly whatever runs on this host.
    ports = {name: str(port) for name, port in zip(DEFAULT_PORTS, free_ports(4), strict=True)}
    env = {
        "PATH": os.environ.get("PATH", ""),
        "PYTHONPATH": os.pathsep.join(sys.path),
        "BUCKET_DIR": str(tmp_path / "nope"),
        "MODEL": "",
        "REQUIRED_GPUS": "0",
        "WEIGHT_TRANSFER": "mock",
        **ports,
    }
    out = subprocess.run([sys.executable, "-m", "guards"], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    lines = [line for line in out.stderr.splitlines() if line.startswith("  [")]
    assert [line.split("]")[0][3:] for line in lines] == [
        "bucket-mount",
        "bucket-writable",
        "hf-home",
        "sandbox",
        "tunnel",
    ], out.stderr
    assert out.stderr.startswith("preflight: 5 problem(s) stop this run before any GPU time is spent:\n")
