"""The chart runs what compose.yaml runs: the same images, the same environment variable names per
service, the same GPUs; and the only way in from outside is cloudflared to the capture port.

Read from `docker compose config` and the rendered chart (offline), never from either file's text.
"""

from __future__ import annotations

import re

import pytest
from settings_tables import FIELDS, effective, states_default

TUNNEL = {"TUNNEL_HOSTNAME": "capture.example.com"}

# compose service -> (chart workload, container). preflight is the engine pod's init step.
WHERE = {
    "preflight": ("grpo-engine", "preflight"),
    "engine": ("grpo-engine", "engine"),
    "env-server": ("grpo-env-server", "env-server"),
    "tunnel": ("grpo-cloudflared", "cloudflared"),
    "tunnel-check": ("grpo-env-server", "tunnel-check"),
    "trainer": ("grpo-trainer", "trainer"),
}

# Every difference in variable names, with the reason a pod needs it. Anything else is drift.
ONLY_IN_COMPOSE = {
    # The chart runs cloudflared exactly when TUNNEL_PROVIDER=cloudflared: no profile to agree with.
    ("preflight", "COMPOSE_PROFILES"),
    ("trainer", "COMPOSE_PROFILES"),
    # cloudflared's log file is in another pod; its metrics server names the URL instead.
    ("tunnel-check", "TUNNEL_LOG"),
    # The opt-out for remote tasks on local docker sandboxes: SANDBOX=docker is refused on a cluster.
    ("env-server", "SANDBOX_DOCKER_REMOTE_TASKS_OK"),
    ("preflight", "SANDBOX_DOCKER_REMOTE_TASKS_OK"),
    # Whether WANDB_API_KEY is set: compose knows at `up` (`${WANDB_API_KEY:+set}`); the chart reads the key
    # from a Secret at pod start, unknown at render time, so there the trainer's own check refuses
    # REPORT_TO=wandb without it (the same line, one pod later).
    ("preflight", "WANDB_API_KEY_SET"),
    # Preflight's cross-field rules of compose alone: the engine's TP x DP against the device ids compose gives
    # it (the chart gives the engine pod TP x DP GPUs itself), and env-server's closing time against compose's
    # stop grace (the chart refuses it against envServer.terminationGracePeriodSeconds at render).
    *(
        ("preflight", n)
        for n in ("ENGINE_GPUS", "ENGINE_TENSOR_PARALLEL_SIZE", "ENGINE_DATA_PARALLEL_SIZE", "ENV_SERVER_STOP_GRACE")
    ),
}
ONLY_IN_CHART = {
    # cloudflared's metrics server is another pod's, not loopback.
    ("tunnel-check", "TUNNEL_METRICS_HOST"),
    # The pods run as a UID with no /etc/passwd entry on a read-only root filesystem (compose runs the
    # images as root): HOME points into the pod's writable /tmp for caches, and USER keeps getpass (which
    # names torch's compile cache directory) from failing on that UID.
    *((s, n) for s in ("preflight", "engine", "env-server", "tunnel-check", "trainer") for n in ("HOME", "USER")),
}


@pytest.fixture(scope="module")
def both(render_chart, values, compose):
    return compose({"TUNNEL_TOKEN": "token-value", **TUNNEL}), render_chart(values({"config": TUNNEL}))


def _container(docs, workload, name):
    doc = next(d for d in docs if d["metadata"]["name"] == workload and d["kind"] in ("Deployment", "Job"))
    spec = doc["spec"]["template"]["spec"]
    return next(c for c in spec.get("initContainers", []) + spec["containers"] if c["name"] == name)


@pytest.mark.parametrize("service", sorted(WHERE))
def test_same_image(both, service):
    cfg, docs = both
    assert _container(docs, *WHERE[service])["image"] == cfg["services"][service]["image"]


@pytest.mark.parametrize("service", sorted(WHERE))
def test_same_environment_variable_names(both, service):
    cfg, docs = both
    in_compose = set(cfg["services"][service].get("environment") or {})
    in_chart = {v["name"] for v in _container(docs, *WHERE[service]).get("env", [])}
    assert in_compose - in_chart == {n for s, n in ONLY_IN_COMPOSE if s == service}, "missing on Kubernetes"
    assert in_chart - in_compose == {n for s, n in ONLY_IN_CHART if s == service}, "new on Kubernetes"


# Values that differ by design, per variable name: the mode itself, where a service binds (its pod, not
# loopback), the GPUs one pod must see (compose's preflight sees the whole host), and the sandboxes'
# stack name (the compose project's under compose, the release's on a cluster).
# NCCL's rendezvous and sockets: loopback between containers of one host under compose, the pod's own
# address and interface between pods on the cluster.
TOPOLOGY = {
    "DEPLOYMENT",
    "ENGINE_HOST",
    "ENV_SERVER_HOST",
    "CAPTURE_HOST",
    # The chart binds the capture proxy to its pod's address on purpose (its NetworkPolicies admit only
    # cloudflared and the trainer): it says so with the opt-out compose leaves empty.
    "CAPTURE_HOST_BEYOND_TUNNEL_OK",
    "REQUIRED_GPUS",
    "STACK_NAME",
    "VLLM_HOST_IP",
    "NCCL_SOCKET_IFNAME",
}


def _without_host(value: str) -> str:
    """A URL with its host taken out (127.0.0.1 under compose, a Service name on the cluster)."""
    return re.sub(r"^(https?://)[^:/]+", r"\1<host>", value)


@pytest.mark.parametrize("service", sorted(WHERE))
def test_same_defaults(both, service):
    """The chart's defaults are the settings tables' (the values compose passes, or the field's default where
    it passes a name through): a setting means the same on both, URLs up to their host."""
    cfg, docs = both
    compose_env = cfg["services"][service].get("environment") or {}
    for var in _container(docs, *WHERE[service]).get("env", []):
        name = var["name"]
        if "value" not in var or name not in compose_env or name in TOPOLOGY:
            continue  # secrets and the run name come by reference
        if not compose_env[name] and name in FIELDS:
            # Passed through empty by compose: the service reads its field's default; the chart states it
            # (or passes it empty too).
            assert var["value"] == "" or states_default(FIELDS[name], var["value"]), f"{service}: {name}"
            continue
        assert _without_host(var["value"]) == _without_host(compose_env[name] or ""), f"{service}: {name}"


def _compose_gpus(svc) -> int | str:
    (device,) = svc["deploy"]["resources"]["reservations"]["devices"]
    return len(device["device_ids"]) if "device_ids" in device else device["count"]


def test_same_gpus(both):
    cfg, docs = both
    gpus = {
        s: int(_container(docs, *WHERE[s]).get("resources", {}).get("limits", {}).get("nvidia.com/gpu", 0))
        for s in WHERE
    }
    assert gpus["engine"] == _compose_gpus(cfg["services"]["engine"]) == 1
    assert gpus["trainer"] == _compose_gpus(cfg["services"]["trainer"]) == 1
    # Compose's preflight sees the whole host (`count: all`) and requires REQUIRED_GPUS of it; on the
    # cluster each GPU pod is its own host: the engine pod's preflight requires the engine's GPUs.
    assert _compose_gpus(cfg["services"]["preflight"]) == -1  # `count: all`, as compose config prints it
    host_total = int(effective(cfg["services"]["preflight"]["environment"], "REQUIRED_GPUS"))
    assert gpus["engine"] + gpus["trainer"] == host_total
    assert gpus["preflight"] == gpus["engine"]
    assert {gpus["env-server"], gpus["tunnel"], gpus["tunnel-check"]} == {0}


def test_engine_gpus_follow_tensor_times_data_parallel(render_chart, values):
    docs = render_chart(values({"config": {"ENGINE_TENSOR_PARALLEL_SIZE": 2, "ENGINE_DATA_PARALLEL_SIZE": 2}}))
    assert _container(docs, "grpo-engine", "engine")["resources"]["limits"]["nvidia.com/gpu"] == 4
    assert _container(docs, "grpo-engine", "preflight")["resources"]["limits"]["nvidia.com/gpu"] == 4


# -- the only path from outside ------------------------------------------------------------------------

COMPONENT = "app.kubernetes.io/component"


def _ingress_edges(docs):
    """(source component, destination component, port or None for any TCP port) that the policies allow."""
    edges = set()
    for policy in (d for d in docs if d["kind"] == "NetworkPolicy"):
        target = policy["spec"]["podSelector"].get("matchLabels", {}).get(COMPONENT)
        for rule in policy["spec"].get("ingress", []):
            assert rule.get("from"), f"{policy['metadata']['name']}: an ingress rule without `from` admits anyone"
            for peer in rule["from"]:
                assert set(peer) == {"podSelector"}, (
                    f"{policy['metadata']['name']}: ingress from {peer} reaches beyond this release's pods"
                )
                source = peer["podSelector"]["matchLabels"]
                assert source["app.kubernetes.io/instance"] == "grpo"
                for port in rule.get("ports") or [{}]:
                    assert port.get("protocol", "TCP") == "TCP"
                    edges.add((source[COMPONENT], target, port.get("port")))
    return edges


def test_default_deny_covers_every_pod(manifests):
    (deny,) = [d for d in manifests if d["kind"] == "NetworkPolicy" and d["metadata"]["name"] == "grpo-default-deny"]
    assert deny["spec"]["podSelector"] == {"matchLabels": {"app.kubernetes.io/instance": "grpo"}}
    assert deny["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert "ingress" not in deny["spec"] and "egress" not in deny["spec"]
    for doc in manifests:
        if doc["kind"] in ("Deployment", "Job"):
            assert doc["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/instance"] == "grpo"


def test_the_only_way_in_is_cloudflared_to_the_capture_port(manifests):
    edges = _ingress_edges(manifests)
    assert edges == {
        ("cloudflared", "env-server", 8100),  # the tunnel -> capture proxy: the one public hop
        ("trainer", "env-server", 8000),  # Task API
        ("env-server", "engine", 8001),  # the capture proxy forwards chat completions
        ("trainer", "engine", None),  # control routes + NCCL
        ("engine", "trainer", None),  # NCCL rendezvous
        ("env-server", "cloudflared", 20241),  # tunnel-check reads /quicktunnel
    }
    # What comes in through the tunnel lands on the capture port and nowhere else.
    assert {(dst, port) for src, dst, port in edges if src == "cloudflared"} == {("env-server", 8100)}
    # Nobody but the tunnel reaches the capture port; the engine and the Task API are reached only by the stack.
    assert {src for src, dst, port in edges if port == 8100} == {"cloudflared"}


def test_nothing_is_published_outside_the_cluster(manifests):
    assert not [d for d in manifests if d["kind"] in ("Ingress", "Gateway", "HTTPRoute", "Route")]
    for svc in (d for d in manifests if d["kind"] == "Service"):
        assert svc["spec"].get("type", "ClusterIP") == "ClusterIP", svc["metadata"]["name"]
        assert "externalIPs" not in svc["spec"]
    for doc in (d for d in manifests if d["kind"] in ("Deployment", "Job")):
        spec = doc["spec"]["template"]["spec"]
        assert not spec.get("hostNetwork") and not spec.get("hostIPC") and not spec.get("hostPID")
        assert spec["automountServiceAccountToken"] is False
        for container in spec.get("initContainers", []) + spec["containers"]:
            assert all("hostPort" not in p for p in container.get("ports", [])), container["name"]
        assert not [v for v in spec.get("volumes", []) if "hostPath" in v], (
            "no node paths (the Docker socket least of all)"
        )
