"""Every pod passes Pod Security "restricted" with the defaults, carries requests (and memory limits) that
count its /dev/shm, and takes the typed escape hatches a cluster needs; none of those hatches can add a
privilege, a host path or a capability."""

from __future__ import annotations

import copy
import re

import helm_python as helm
import pytest
from unit.helm.helm_render import REQUIRED, merged, render
from unit.helm.pod_security import pod_specs, restricted_violations

TUNNEL = {"config": {"TUNNEL_HOSTNAME": "capture.example.com"}}
UNITS = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 10**3, "M": 10**6, "G": 10**9, "": 1}


def _bytes(quantity) -> int:
    number, unit = re.fullmatch(r"([0-9.]+)([A-Za-z]*)", str(quantity)).groups()
    return int(float(number) * UNITS[unit])


def _containers(pod):
    return pod.get("initContainers", []) + pod["containers"]


@pytest.mark.parametrize("extra", [{}, TUNNEL], ids=["quick-tunnel", "named-tunnel"])
def test_every_pod_passes_restricted_by_default(extra):
    docs = render(merged(extra))
    pods = dict(pod_specs(docs))
    assert set(pods) == {"grpo-engine", "grpo-env-server", "grpo-cloudflared", "grpo-trainer"}
    for name, pod in pods.items():
        assert restricted_violations(pod) == [], name


def test_the_checker_knows_a_violation_when_it_sees_one():
    """Each control of the profile, broken once on an otherwise admitted pod, is reported."""
    (pod,) = [p for n, p in pod_specs(render()) if n == "grpo-trainer"]
    breaks = {
        "hostIPC": lambda p: p.update(hostIPC=True),
        "volume": lambda p: p["volumes"].append({"name": "d", "hostPath": {"path": "/dev"}}),
        "privileged": lambda p: p["containers"][0]["securityContext"].update(privileged=True),
        "capabilities.add": lambda p: p["containers"][0]["securityContext"]["capabilities"].update(add=["IPC_LOCK"]),
        "drop lacks ALL": lambda p: p["containers"][0]["securityContext"]["capabilities"].update(drop=[]),
        "allowPrivilegeEscalation": lambda p: p["containers"][0]["securityContext"].pop("allowPrivilegeEscalation"),
        "runAsNonRoot": lambda p: p["securityContext"].pop("runAsNonRoot"),
        "runAsUser 0": lambda p: p["securityContext"].update(runAsUser=0),
        "seccompProfile": lambda p: p["securityContext"].pop("seccompProfile"),
        "sysctl": lambda p: p["securityContext"].update(sysctls=[{"name": "kernel.msgmax", "value": "1"}]),
    }
    for label, apply in breaks.items():
        broken = copy.deepcopy(pod)
        apply(broken)
        assert any(label in v for v in restricted_violations(broken)), label


def test_writable_paths_are_emptydirs_on_a_read_only_root():
    """What each image writes (read from images/*/Dockerfile and services/): /tmp and HOME (vLLM, Triton,
    torch.compile caches; the engine probe's proof file; tempfile users), /dev/shm (NCCL, vLLM workers),
    Harbor's TRIALS_DIR, the hand-off folder, the bucket. Everything else is read-only."""
    docs = render()
    want = {
        ("grpo-engine", "preflight"): {"/bucket", "/tmp"},
        ("grpo-engine", "engine"): {"/bucket", "/dev/shm", "/tmp"},
        ("grpo-env-server", "env-server"): {"/handoff", "/tmp", "/var/lib/asyncgrpo-harbor/trials"},
        ("grpo-env-server", "tunnel-check"): {"/handoff", "/tmp"},
        ("grpo-cloudflared", "cloudflared"): set(),
        ("grpo-trainer", "ready-gate"): {"/tmp"},
        ("grpo-trainer", "trainer"): {"/bucket", "/dev/shm", "/tmp"},
    }
    got = {}
    for name, pod in pod_specs(docs):
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        for c in _containers(pod):
            assert c["securityContext"]["readOnlyRootFilesystem"] is True
            mounts = c.get("volumeMounts", [])
            for m in mounts:
                assert set(volumes[m["name"]]) & {"emptyDir", "persistentVolumeClaim"}, m
            got[(name, c["name"])] = {m["mountPath"] for m in mounts}
            env = {v["name"]: v.get("value") for v in c.get("env", [])}
            if c["name"] != "cloudflared":
                assert env["HOME"] == "/tmp" and env["USER"] == "asyncgrpo", c["name"]
    assert got == want


def test_pod_security_is_overridable_through_typed_values():
    docs = render(
        merged(
            {
                "podSecurity": {"runAsUser": None, "runAsGroup": None, "fsGroup": None},
                "engine": {"podSecurity": {"readOnlyRootFilesystem": False, "runAsUser": 2000}},
            }
        )
    )
    pods = dict(pod_specs(docs))
    # OpenShift: the UID is the namespace's, so none is written; still non-root and seccomp'd.
    assert pods["grpo-trainer"]["securityContext"] == {
        "runAsNonRoot": True,
        "fsGroupChangePolicy": "OnRootMismatch",
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert pods["grpo-engine"]["securityContext"]["runAsUser"] == 2000
    assert {c["securityContext"]["readOnlyRootFilesystem"] for c in _containers(pods["grpo-engine"])} == {False}
    assert pods["grpo-cloudflared"]["securityContext"]["runAsUser"] == 65532
    for name, pod in pods.items():
        assert restricted_violations(pod) == [], name


# -- resources -----------------------------------------------------------------------------------------


def test_every_container_requests_cpu_and_memory_and_is_memory_limited():
    for name, pod in pod_specs(render(merged(TUNNEL))):
        for c in _containers(pod):
            res = c["resources"]
            assert {"cpu", "memory"} <= set(res["requests"]), (name, c["name"])
            assert _bytes(res["limits"]["memory"]) >= _bytes(res["requests"]["memory"]), (name, c["name"])


def test_gpu_pods_count_their_shm_and_are_not_best_effort():
    docs = render()
    for name, shm in (("grpo-engine", "16Gi"), ("grpo-trainer", "16Gi")):
        pod = dict(pod_specs(docs))[name]
        (main,) = [c for c in pod["containers"] if "/dev/shm" in {m["mountPath"] for m in c["volumeMounts"]}]
        (dshm,) = [v for v in pod["volumes"] if v["name"] == "dshm"]
        assert dshm["emptyDir"] == {"medium": "Memory", "sizeLimit": shm}
        # tmpfs pages are charged to the container: the request must hold the shm and then some.
        assert _bytes(main["resources"]["requests"]["memory"]) > _bytes(shm)
        assert main["resources"]["limits"]["nvidia.com/gpu"] == 1
        assert "nvidia.com/gpu" not in main["resources"]["requests"]


def test_user_resources_replace_the_defaults_key_by_key():
    docs = render(merged({"engine": {"resources": {"requests": {"cpu": "8"}}}}))
    engine = dict(pod_specs(docs))["grpo-engine"]["containers"][0]
    assert engine["resources"] == {
        "requests": {"cpu": "8", "memory": "32Gi"},
        "limits": {"memory": "48Gi", "nvidia.com/gpu": 1},
    }


# -- escape hatches --------------------------------------------------------------------------------------


def test_every_escape_hatch_lands_where_it_should():
    hatch = {
        "runtimeClassName": "nvidia",
        "priorityClassName": "training-high",
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "nodeSelector": {"pool": "h200"},
        "podLabels": {"team": "ml"},
        "podAnnotations": {"prometheus.io/scrape": "false"},
        "extraEnv": [
            {"name": "HTTPS_PROXY", "value": "http://proxy.corp:3128"},
            {"name": "CA_HASH", "valueFrom": {"configMapKeyRef": {"name": "corp-ca", "key": "hash"}}},
        ],
        "extraVolumes": [{"name": "corp-ca", "configMap": {"name": "corp-ca"}}],
        "extraVolumeMounts": [{"name": "corp-ca", "mountPath": "/etc/corp-ca", "readOnly": True}],
    }
    values = merged(TUNNEL, {"serviceAccountName": "grpo-runner"})
    for comp in ("engine", "envServer", "cloudflared", "trainer"):
        values[comp] = copy.deepcopy(hatch)
    docs = render(values)
    for name, pod in pod_specs(docs):
        doc = next(d for d in docs if d["metadata"]["name"] == name and d["kind"] in ("Deployment", "Job"))
        meta = doc["spec"]["template"]["metadata"]
        assert meta["labels"]["team"] == "ml" and meta["annotations"] == {"prometheus.io/scrape": "false"}
        for key in ("runtimeClassName", "priorityClassName", "affinity", "tolerations", "nodeSelector"):
            assert pod[key] == hatch[key], (name, key)
        assert pod["serviceAccountName"] == "grpo-runner"
        assert pod["automountServiceAccountToken"] is False
        assert {"name": "corp-ca", "configMap": {"name": "corp-ca"}} in pod["volumes"]
        for c in _containers(pod):
            assert c["env"][-2:] == hatch["extraEnv"], (name, c["name"])
            assert c["volumeMounts"][-1] == hatch["extraVolumeMounts"][0], (name, c["name"])
        assert restricted_violations(pod) == [], name


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"engine": {"extraVolumes": [{"name": "root", "hostPath": {"path": "/"}}]}}, "/engine/extraVolumes/0"),
        (
            {"trainer": {"extraVolumes": [{"name": "x", "emptyDir": {}, "hostPath": {"path": "/"}}]}},
            "/trainer/extraVolumes/0",
        ),
        ({"engine": {"podSecurity": {"privileged": True}}}, "/engine/podSecurity"),
        ({"podSecurity": {"capabilities": {"add": ["SYS_ADMIN"]}}}, "/podSecurity"),
        ({"podSecurity": {"allowPrivilegeEscalation": True}}, "/podSecurity"),
        ({"podSecurity": {"seccompProfile": "Unconfined"}}, "/podSecurity/seccompProfile"),
        ({"envServer": {"podSecurity": {"hostNetwork": True}}}, "/envServer/podSecurity"),
        (
            {"engine": {"podAnnotations": {"container.apparmor.security.beta.kubernetes.io/engine": "unconfined"}}},
            "invalid propertyName 'container.apparmor",
        ),
        (
            {"trainer": {"podLabels": {"app.kubernetes.io/component": "engine"}}},
            "invalid propertyName 'app.kubernetes.io/component'",
        ),
        ({"engine": {"resources": {"requests": {"nvidia.com/gpu": 2}}}}, "/engine/resources/requests"),
        ({"trainer": {"resources": {"limits": {"memory": "lots"}}}}, "/trainer/resources/limits/memory"),
        ({"engine": {"affinity": {"nodeName": "gpu-1"}}}, "/engine/affinity"),
        ({"engine": {"extraEnv": [{"name": "X\ny", "value": "1"}]}}, "/engine/extraEnv/0/name"),
        ({"engine": {"extraEnv": [{"name": "X", "value": "a\nb"}]}}, "/engine/extraEnv/0/value"),
        (
            {"engine": {"extraVolumeMounts": [{"name": "x", "mountPath": "/x", "mountPropagation": "Bidirectional"}]}},
            "/engine/extraVolumeMounts/0",
        ),
        (
            {"engine": {"extraVolumeMounts": [{"name": "x", "mountPath": "/x", "subPath": "../../etc"}]}},
            "/engine/extraVolumeMounts/0/subPath",
        ),
        (
            {"engine": {"extraEnv": [{"name": "MODEL", "value": "other"}]}},
            "extraEnv sets MODEL, which the chart already sets",
        ),
        ({"trainer": {"extraEnv": [{"name": "HF_TOKEN", "value": "hf_x"}]}}, "extraEnv sets HF_TOKEN"),
        ({"serviceAccountName": "Admin\n"}, "/serviceAccountName"),
        ({"engine": {"runtimeClassName": "nvidia\n  hostPID: true"}}, "/engine/runtimeClassName"),
        ({"trainer": {"terminationGracePeriodSeconds": 0}}, "/trainer/terminationGracePeriodSeconds"),
    ],
)
def test_an_escape_hatch_cannot_open_the_pod(override, message):
    with pytest.raises((helm.HelmValuesError, helm.HelmRenderError)) as caught:
        render({**REQUIRED, **override})
    assert message in str(caught.value)
