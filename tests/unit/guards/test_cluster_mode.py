"""The guards' cluster mode (DEPLOYMENT=kubernetes, as the Helm chart sets it), host venv, no cluster.

The emptyDir lines were recorded on this machine by making the kubelet's own layout and binding it the
way the kubelet hands a volume to a container (`unshare --mount`; `mount --bind
/var/lib/kubelet/pods/<uid>/volumes/kubernetes.io~empty-dir/bucket <target>`, and for `medium: Memory`
a tmpfs mounted there first), then reading /proc/self/mountinfo: the kernel's own lines, with the
target renamed /bucket. The /etc/hostname lines are a pod's, where the runtime binds it from its
sandbox folder on the node's disk.
"""

from __future__ import annotations

import socket

import pytest

from guards import ready_gate
from guards.checks import OPT_OUT_PHRASE, Probes, run_all
from stack import deployment

EMPTY_DIR = (
    "137 66 254:0 /var/lib/kubelet/pods/5f0c6a1e-2b7d-4c1e-9a53-0d6f2e8b7c41/volumes/kubernetes.io~empty-dir/bucket "
    "/bucket rw,relatime - ext4 /dev/vda rw,discard,resv_strict,resuid=65534,resgid=65534\n"
)
EMPTY_DIR_MEMORY = "139 66 0:58 / /bucket rw,relatime - tmpfs tmpfs rw\n"
# The pod's /etc/hostname on the same disk as the kubelet's folders (the common node layout) ...
HOSTNAME_SAME_DISK = (
    "140 66 254:0 /var/lib/containerd/io.containerd.grpc.v1.cri/sandboxes/4e1f/hostname /etc/hostname "
    "rw,relatime - ext4 /dev/vda rw\n"
)
# ... and on a node whose /var/lib/kubelet is a disk of its own: without the emptyDir rule, the bucket
# would pass as "a folder on a separate filesystem".
HOSTNAME_OTHER_DISK = (
    "140 66 8:1 /var/lib/containerd/io.containerd.grpc.v1.cri/sandboxes/4e1f/hostname /etc/hostname "
    "rw,relatime - ext4 /dev/sda1 rw\n"
)
PVC_NFS = "150 66 0:88 / /bucket rw,relatime - nfs4 10.0.0.2:/export/pvc-1c2d rw,vers=4.1\n"
PVC_S3_CSI = "151 66 0:89 / /bucket rw,nosuid,nodev,relatime - fuse.mountpoint-s3 mountpoint-s3 rw,user_id=0\n"
PVC_BLOCK = "152 66 8:32 / /bucket rw,relatime - ext4 /dev/sdc rw\n"
LOCAL_PATH_PV = (
    "153 66 254:0 /opt/local-path-provisioner/pvc-9a8b_ml_grpo-bucket /bucket rw,relatime - ext4 /dev/vda rw\n"
)


def env_for(tmp_path, **over):
    bucket = tmp_path / "bucket"
    bucket.mkdir(exist_ok=True)
    env = {
        "DEPLOYMENT": "kubernetes",
        "BUCKET_DIR": str(bucket),
        "HF_HOME": str(bucket / "hf-home"),
        "REQUIRED_GPUS": "1",
        "SANDBOX": "e2b",
        "E2B_API_KEY": "e2b_test",
        "TUNNEL_PROVIDER": "cloudflared",
        "MODEL": "Qwen/Qwen3-1.7B",
        "DATASETS": "/app/datasets/starter",
        "MIN_FREE_DISK_GB": "0",
        "AGENT_STEP_LIMIT": "12",
    }
    env.update(over)
    return env


def probes(tmp_path, text, docker_socket="/nonexistent.sock"):
    info = tmp_path / "mountinfo"
    info.write_text(text.replace(" /bucket ", f" {tmp_path / 'bucket'} "))
    return Probes(mountinfo_path=str(info), docker_socket=docker_socket, gpu_count=lambda: (1, "test counter"))


def found(env, probes):
    return {f.check: f.message for f in run_all(env, probes) if f.check != "weight-transfer"}


@pytest.mark.parametrize("text", [PVC_NFS, PVC_S3_CSI, PVC_BLOCK])
def test_a_pvc_passes_in_a_pod(tmp_path, text):
    assert found(env_for(tmp_path), probes(tmp_path, text + HOSTNAME_SAME_DISK)) == {}


@pytest.mark.parametrize("hostname", [HOSTNAME_SAME_DISK, HOSTNAME_OTHER_DISK])
def test_an_empty_dir_is_refused(tmp_path, hostname):
    message = found(env_for(tmp_path), probes(tmp_path, EMPTY_DIR + hostname))["bucket-mount"]
    assert message.startswith(
        f"bucket {tmp_path / 'bucket'} is not a real mount: it is a Kubernetes emptyDir "
        "(/var/lib/kubelet/pods/5f0c6a1e-2b7d-4c1e-9a53-0d6f2e8b7c41/volumes/kubernetes.io~empty-dir/bucket), "
        "deleted with the pod. Mount a PersistentVolumeClaim at the bucket (chart values bucket.existingClaim"
    )


def test_an_empty_dir_is_refused_under_compose_too(tmp_path):
    env = env_for(tmp_path, DEPLOYMENT="compose")
    assert "Kubernetes emptyDir" in found(env, probes(tmp_path, EMPTY_DIR + HOSTNAME_OTHER_DISK))["bucket-mount"]


def test_a_memory_empty_dir_is_refused(tmp_path):
    message = found(env_for(tmp_path), probes(tmp_path, EMPTY_DIR_MEMORY + HOSTNAME_SAME_DISK))["bucket-mount"]
    assert "it is a tmpfs (memory) filesystem" in message and "PersistentVolumeClaim" in message


def test_a_node_local_volume_is_named_as_such(tmp_path):
    message = found(env_for(tmp_path), probes(tmp_path, LOCAL_PATH_PV + HOSTNAME_SAME_DISK))["bucket-mount"]
    assert (
        "on the node's own disk" in message
        and "node-local volume (hostPath, local-path), lost with the node" in message
    )


def test_the_opt_out_still_works_in_a_pod(tmp_path):
    env = env_for(tmp_path, BUCKET_NOT_A_MOUNT_OK=OPT_OUT_PHRASE)
    assert found(env, probes(tmp_path, EMPTY_DIR + HOSTNAME_SAME_DISK)) == {}


def test_the_docker_socket_is_refused_on_kubernetes(tmp_path):
    sock_path = tmp_path / "docker.sock"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(sock_path))  # a real socket: under compose this passes (next test)
        env = env_for(tmp_path, SANDBOX="docker")
        message = found(env, probes(tmp_path, PVC_NFS, docker_socket=str(sock_path)))["sandbox"]
        assert message == (
            "SANDBOX=docker is refused on Kubernetes (DEPLOYMENT=kubernetes): a pod given the node's Docker socket "
            "gives every sandbox the node; use SANDBOX=e2b with E2B_API_KEY in the chart's Secret"
        )
        compose = env_for(tmp_path, SANDBOX="docker", DEPLOYMENT="compose", COMPOSE_PROFILES="cloudflared")
        assert "sandbox" not in found(compose, probes(tmp_path, PVC_NFS, docker_socket=str(sock_path)))


def test_ports_are_checked_but_not_bound_in_a_pod(tmp_path):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = str(held.getsockname()[1])
        env = env_for(tmp_path, ENGINE_PORT=port)
        assert "ports" not in found(env, probes(tmp_path, PVC_NFS))
        assert "already in use" in found({**env, "DEPLOYMENT": "compose"}, probes(tmp_path, PVC_NFS))["ports"]
    clash = env_for(tmp_path, ENGINE_PORT="8100", CAPTURE_PORT="8100")
    assert "are both 8100" in found(clash, probes(tmp_path, PVC_NFS))["ports"]


def test_no_compose_profiles_needed_on_kubernetes(tmp_path):
    assert "tunnel" not in found(env_for(tmp_path), probes(tmp_path, PVC_NFS))
    env = env_for(tmp_path, DEPLOYMENT="compose")
    assert "COMPOSE_PROFILES does not contain cloudflared" in found(env, probes(tmp_path, PVC_NFS))["tunnel"]


def test_an_unknown_deployment_is_one_line_and_reads_as_compose(tmp_path):
    env = env_for(tmp_path, DEPLOYMENT="k8s")
    problems = found(env, probes(tmp_path, PVC_NFS))
    assert problems["deployment"] == (
        "DEPLOYMENT='k8s' is not allowed: use compose (the default, docker compose) or kubernetes "
        "(set by the Helm chart in deploy/helm) (default compose)"
    )
    assert "tunnel" in problems  # the stricter mode's checks still ran


def test_deployment_defaults_to_compose():
    assert deployment.read({}) == deployment.read({"DEPLOYMENT": " "}) == "compose"
    assert deployment.read({"DEPLOYMENT": "kubernetes"}) == "kubernetes"


# -- the trainer's ready-gate --------------------------------------------------------------------------


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t

    def sleep(self, s):
        self.t += s


def test_ready_gate_waits_until_every_name_resolves():
    clock, lines = Clock(), []
    ready_after = {"grpo-engine-ready": 60.0, "grpo-env-server-ready": 10.0}
    ok = ready_gate.wait(
        ready_after, ready=lambda n: clock.t >= ready_after[n], sleep=clock.sleep, clock=clock, say=lines.append
    )
    assert ok and clock.t == 60.0
    assert lines[0].startswith("ready-gate: waiting 0s for grpo-engine-ready, grpo-env-server-ready")
    assert "waiting 30s for grpo-engine-ready (no Ready pod yet" in lines[1]
    assert lines[-1] == "ready-gate: all ready after 60s"


def test_ready_gate_gives_up_only_when_told():
    clock, lines = Clock(), []
    ok = ready_gate.wait(["x"], ready=lambda n: False, sleep=clock.sleep, clock=clock, say=lines.append, timeout_s=10)
    assert not ok and lines[-1] == "ready-gate: gave up after 10s; not ready: x"


def test_ready_gate_resolves_real_names():
    assert ready_gate.resolves("localhost")
    assert not ready_gate.resolves("grpo-engine-ready.invalid")
