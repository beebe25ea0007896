"""Preflight checks every trainer setting with the trainer's own reader, sizes the disk from the model and
the checkpoints the run keeps, proves the bucket can rename, tells this stack's ports from a stranger's,
and the trainer refuses more than one GPU without a distributed launcher. Each triggered for real."""

import json
import os
import socket
import threading
from pathlib import Path

import pytest
from test_checks import GCSFUSE, good_env, probes_for

from guards import disk, ports
from guards.checks import run_all
from stack.env import EnvError
from stack.readers import trainer as config


def lines(env, probes, phase="preflight"):
    return [(f.check, f.message) for f in run_all(env, probes, phase) if f.check != "weight-transfer"]


# --- every trainer setting, one line each ------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "value", "line"),
    [
        ("MAX_STEPS", "2e2", "MAX_STEPS='2e2' is not a whole number: set MAX_STEPS to an integer (default 200)"),
        (
            "TEMPERATURE",
            "hot",
            "TEMPERATURE='hot' is not a number: set it above 0 (the policy's logprobs are processed at it; 0 is greedy, "
            "not a policy) (default 1.0)",
        ),
        (
            "NUM_GENERATIONS",
            "eight",
            "NUM_GENERATIONS='eight' is not a whole number: set it to at least 2 (GRPO scores each rollout against the "
            "others of its group: one has no baseline) (default 8)",
        ),
        (
            "NUM_GENERATIONS",
            "1",
            "NUM_GENERATIONS='1' is below 2: set it to at least 2 (GRPO scores each rollout against the others of its "
            "group: one has no baseline) (default 8)",
        ),
        (
            "SAVE_STEPS",
            "0",
            "SAVE_STEPS='0' is below 1: set it to at least 1 (0 would never save a checkpoint) (default 25)",
        ),
        ("SAVE_TOTAL_LIMIT", "0", "SAVE_TOTAL_LIMIT='0' is below 1: set SAVE_TOTAL_LIMIT to at least 1 (default 2)"),
        (
            "TEMPERATURE",
            "0",
            "TEMPERATURE='0' is not above 0: set it above 0 (the policy's logprobs are processed at it; 0 is greedy",
        ),
        ("LEARNING_RATE", "nan", "LEARNING_RATE='nan' is not a finite number"),
        ("TOKEN_BUDGET", "-1", "TOKEN_BUDGET='-1' is below 0"),
        (
            "REPORT_TO",
            "mlflow",
            "REPORT_TO='mlflow' is not allowed: set REPORT_TO to one of trackio, tensorboard, wandb, none (default "
            "trackio)",
        ),
        (
            "TRAIN_DTYPE",
            "fp8",
            "TRAIN_DTYPE='fp8' is not allowed: set TRAIN_DTYPE to one of bfloat16, float16, float32",
        ),
        ("TRAINER_COMPILE_LAYERS", "maybe", "TRAINER_COMPILE_LAYERS='maybe' is not a yes/no value"),
        ("ENV_SERVER_URL", "localhost:8000", "ENV_SERVER_URL='localhost:8000' is not an http(s) URL"),
        ("AGENT_TIMEOUT_S", "0", "AGENT_TIMEOUT_S='0' is not above 0"),
        ("MAX_INFLIGHT_ROLLOUTS", "0", "MAX_INFLIGHT_ROLLOUTS='0' is below 1"),
    ],
)
def test_each_bad_setting_is_one_line_in_preflight(tmp_path, name, value, line):
    found = [m for c, m in lines(good_env(tmp_path, **{name: value}), probes_for(tmp_path, GCSFUSE))]
    assert len(found) == 1, found
    assert found[0].startswith(line), found[0]
    # The trainer refuses the same value with the same line (one definition, not two).
    with pytest.raises(EnvError) as err:
        config.from_env({name: value})
    assert err.value.problems == found


def test_every_bad_setting_is_listed_at_once(tmp_path):
    env = good_env(tmp_path, MAX_STEPS="2e2", TEMPERATURE="hot", NUM_GENERATIONS="eight", SAVE_STEPS="0")
    found = lines(env, probes_for(tmp_path, GCSFUSE))
    assert [c for c, _ in found] == ["trainer-settings"] * 4
    assert [m.split("=")[0] for _, m in found] == ["MAX_STEPS", "NUM_GENERATIONS", "TEMPERATURE", "SAVE_STEPS"]


def test_defaults_and_good_values_read_as_stated():
    s = config.from_env({"NUM_GENERATIONS": "4", "SAVE_TOTAL_LIMIT": "3", "ENGINE_URL": "http://127.0.0.1:9/"})
    assert (s.num_generations, s.per_device_train_batch_size, s.save_total_limit, s.engine_url) == (
        4,
        4,
        3,
        "http://127.0.0.1:9",
    )
    assert config.from_env({}).save_total_limit == config.FIELDS["SAVE_TOTAL_LIMIT"].default == 2


# --- disk: model size x retained checkpoints + cache ---------------------------------------------------
def test_disk_need_is_model_size_times_retained_checkpoints_plus_cache(tmp_path):
    size = disk.ModelSize(weight_bytes=4 * 10**9, stored_dtype_bytes=2, source="test", cached=False)
    need, phrase = disk.needed_bytes(size, "bfloat16", save_total_limit=2)
    # (2 kept + 1 being written) x 3 x 4 GB + 4 GB cache, +10%
    assert need == int(1.1 * (3 * 12 + 4) * 10**9)
    assert "12.0 GB per checkpoint" in phrase and "4.0 GB model cache" in phrase
    cached = disk.ModelSize(4 * 10**9, 2, "test", cached=True)
    assert disk.needed_bytes(cached, "float32", 1)[0] == int(1.1 * 2 * 3 * 8 * 10**9)


def test_disk_guard_refuses_with_the_arithmetic(tmp_path):
    probes = probes_for(tmp_path, GCSFUSE)
    probes.model_size = lambda model, hf_home: disk.ModelSize(4 * 10**9, 2, f"{model} on the Hub", False)
    probes.free_bytes = lambda where: 30 * 10**9
    # bfloat16 checkpoints (the float32 default doubles them: stack/sizing/precision.py)
    found = dict(lines(good_env(tmp_path, SAVE_TOTAL_LIMIT="2", TRAIN_DTYPE="bfloat16"), probes))
    assert found["disk"].startswith("30.0 GB free at ")
    assert "need 44.0 GB: (SAVE_TOTAL_LIMIT=2 + 1 being written) x 12.0 GB per checkpoint" in found["disk"]
    # SAVE_TOTAL_LIMIT=1: 1.1 x 2 x 12 + 4.4 = 30.8 GB > 30 GB free: still refused, with its own figure.
    # MIN_FREE_DISK_GB stays a floor above the computed figure.
    found = dict(lines(good_env(tmp_path, SAVE_TOTAL_LIMIT="1", MIN_FREE_DISK_GB="35", TRAIN_DTYPE="bfloat16"), probes))
    assert "need 35.0 GB: MIN_FREE_DISK_GB=35 (above the 30.8 GB of" in found["disk"]


def test_model_size_from_a_local_folder_and_the_hf_cache(tmp_path):
    local = tmp_path / "model"
    local.mkdir()
    (local / "model.safetensors").write_bytes(b"x" * 1000)
    (local / "config.json").write_text(json.dumps({"torch_dtype": "float32"}))
    size = disk.model_size(str(local), "")
    assert (size.weight_bytes, size.stored_dtype_bytes, size.cached) == (1000, 4, True)
    snap = tmp_path / "hf" / "hub" / "models--org--m" / "snapshots" / "abc"
    snap.mkdir(parents=True)
    (snap / "model-00001.safetensors").write_bytes(b"x" * 300)
    (snap / "model-00002.safetensors").write_bytes(b"x" * 200)
    size = disk.model_size("org/m", str(tmp_path / "hf"), hub_timeout_s=0.1)
    assert (size.weight_bytes, size.cached) == (500, True)


# --- the bucket must rename -------------------------------------------------------------------------------
def test_a_bucket_that_cannot_rename_is_refused(tmp_path):
    probes = probes_for(tmp_path, GCSFUSE)

    def no_rename(src, dst):
        raise OSError(95, "Operation not supported")

    probes.rename = no_rename
    found = dict(lines(good_env(tmp_path), probes))
    assert found["bucket-writable"].startswith(
        f"bucket {tmp_path / 'bucket'} cannot rename files (Operation not supported): status.json and checkpoints"
    )
    assert list((tmp_path / "bucket").iterdir()) == []  # the probe file is gone either way
    probes.rename = None
    assert "bucket-writable" not in dict(lines(good_env(tmp_path), probes))
    assert list((tmp_path / "bucket").iterdir()) == []


# --- ports: this stack's own services are not strangers ------------------------------------------------
def hold(port):
    sock = socket.socket()
    sock.bind(("127.0.0.1", port))
    sock.listen()
    return sock


def test_a_port_held_by_this_stacks_running_service_passes(tmp_path, capsys):
    env = good_env(tmp_path)
    probes = probes_for(tmp_path, GCSFUSE)
    with hold(int(env["ENGINE_PORT"])), hold(int(env["TUNNEL_METRICS_PORT"])):
        probes.port_owner = lambda: ports.Owners("asyncgrpo-harbor", {"engine", "tunnel", "tunnel-check"})
        assert "ports" not in dict(lines(env, probes))
        assert "is held by this stack's running engine (asyncgrpo-harbor)" in capsys.readouterr().out
        # The engine of this stack is NOT running: whatever holds its port is a stranger.
        probes.port_owner = lambda: ports.Owners("asyncgrpo-harbor", {"tunnel"})
        msg = dict(lines(env, probes))["ports"]
        assert msg == (
            f"port {env['ENGINE_PORT']} (ENGINE_PORT) is already in use on this host by something other than this "
            f"stack's engine: stop what holds it (`ss -ltnp 'sport = :{env['ENGINE_PORT']}'`) or set ENGINE_PORT "
            "to a free port"
        )
        probes.port_owner = lambda: ports.Owners(None, why="preflight is not running in a Docker container")
        assert (
            "(preflight cannot tell this stack's services from others: preflight is not running"
            in (dict(lines(env, probes))["ports"])
        )


class FakeDocker:
    """A Docker Engine API on a unix socket answering the two calls preflight makes; the real daemon's
    answers are shaped like these (GET /containers/{id}/json, GET /containers/json?filters=...)."""

    def __init__(self, path, project, services):
        import http.server
        import socketserver

        me = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                me.paths.append(self.path)
                if self.path.startswith("/containers/json"):
                    body = [{"Labels": {ports.SERVICE_LABEL: s, ports.PROJECT_LABEL: project}} for s in services]
                else:
                    body = {"Config": {"Labels": {ports.PROJECT_LABEL: project, ports.SERVICE_LABEL: "preflight"}}}
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *a):
                pass

            def address_string(self):
                return "unix"

        class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
            daemon_threads = True

        self.paths = []
        self.server = Server(str(path), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def test_stack_owners_asks_docker_with_its_own_containers_project_label(tmp_path):
    cid = "a" * 64
    info = tmp_path / "mountinfo"
    info.write_text(f"117 51 254:0 /var/lib/docker/containers/{cid}/hostname /etc/hostname rw - ext4 /dev/vda rw\n")
    sock = tmp_path / "docker.sock"
    fake = FakeDocker(sock, "asyncgrpo-faults", ["engine", "tunnel"])
    owners = ports.stack_owners(str(sock), str(info))
    assert owners.project == "asyncgrpo-faults" and owners.running == {"engine", "tunnel"}
    assert fake.paths[0] == f"/containers/{cid}/json"
    assert "com.docker.compose.project%3Dasyncgrpo-faults" in fake.paths[1]
    fake.server.shutdown()
    os.unlink(sock)
    assert "did not answer" in ports.stack_owners(str(sock), str(info)).why
    info.write_text("1 0 8:1 / / rw - ext4 /dev/sda1 rw\n")
    assert ports.stack_owners(str(sock), str(info)).why == "preflight is not running in a Docker container"


# --- one GPU per trainer process unless a launcher started it ----------------------------------------
def test_the_trainer_refuses_two_gpus_without_a_launcher(tmp_path):
    probes = probes_for(tmp_path, GCSFUSE)
    probes.visible_gpus = lambda: (2, "torch.cuda.device_count()")
    env = good_env(tmp_path, CUDA_VISIBLE_DEVICES="0,1")
    msg = dict(lines(env, probes, phase="trainer"))["trainer-gpus"]
    assert msg.startswith("the trainer sees 2 GPUs (torch.cuda.device_count(); CUDA_VISIBLE_DEVICES='0,1')")
    assert "TRAINER_GPUS=1" in msg
    assert "trainer-gpus" not in dict(lines(env, probes))  # preflight sees the whole host: not its business
    assert "trainer-gpus" not in dict(lines({**env, "WORLD_SIZE": "2", "LOCAL_RANK": "0"}, probes, "trainer"))
    probes.visible_gpus = lambda: (1, "torch.cuda.device_count()")
    assert "trainer-gpus" not in dict(lines(env, probes, phase="trainer"))


def test_compose_mounts_the_docker_socket_into_preflight():
    text = (Path(__file__).resolve().parents[3] / "compose.yaml").read_text()
    block = text.split("\n  preflight:\n", 1)[1].split("\n  engine:\n", 1)[0]
    assert "/var/run/docker.sock:/var/run/docker.sock:ro" in block
