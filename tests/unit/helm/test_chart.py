"""The chart renders offline, lints strictly, every manifest validates strictly against a pinned
Kubernetes version's schemas, and wrong values fail at `helm install` with a line that names the fix.

Validation: kubernetes-validate ships the OpenAPI-derived JSON schemas of each Kubernetes release in its
wheel; its `-strict` variants refuse unknown fields (a misspelt key that a cluster would silently drop).
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import helm_python as helm
import kubernetes_validate
import pytest

from guards.checks import RUN_NAME_RE
from stack.readers.stop_rules import RULES
from stack.readers.trainer import fresh_run_name

# The Kubernetes release the chart is tested against (PINS.md); Chart.yaml's kubeVersion is the floor.
KUBE_VERSION = "1.33.0"
CHART = Path(__file__).resolve().parents[3] / "deploy/helm/asyncgrpo-harbor"
RELEASE = "grpo"  # as conftest renders it


def test_renders_the_designed_workloads(manifests):
    kinds = sorted((d["kind"], d["metadata"]["name"]) for d in manifests)
    assert kinds == sorted(
        [
            ("PersistentVolumeClaim", "grpo-bucket"),
            ("ConfigMap", "grpo-run"),
            ("Job", "grpo-engine"),
            ("Service", "grpo-engine"),
            ("Service", "grpo-engine-ready"),
            ("Deployment", "grpo-env-server"),
            ("Service", "grpo-capture"),
            ("Service", "grpo-env-server"),
            ("Service", "grpo-env-server-ready"),
            ("Deployment", "grpo-cloudflared"),
            ("Service", "grpo-cloudflared-metrics"),
            ("Job", "grpo-trainer"),
            ("NetworkPolicy", "grpo-default-deny"),
            ("NetworkPolicy", "grpo-dns"),
            ("NetworkPolicy", "grpo-engine"),
            ("NetworkPolicy", "grpo-env-server"),
            ("NetworkPolicy", "grpo-cloudflared"),
            ("NetworkPolicy", "grpo-trainer"),
            ("PodDisruptionBudget", "grpo-engine"),
            ("PodDisruptionBudget", "grpo-env-server"),
            ("PodDisruptionBudget", "grpo-trainer"),
        ]
    )


def test_lints_strictly():
    report = helm.lint(
        str(CHART), {"bucket": {"storageClassName": "nfs-rwx"}}, strict=True, kube_version=f"v{KUBE_VERSION}"
    )
    # Severity 1 is information (--strict fails on warnings, 2, and errors, 3); the one we get is the
    # missing icon, which this project has none of.
    assert report["errors"] == [], report
    assert [(m["path"], m["error"]) for m in report["messages"]] == [("Chart.yaml", "icon is recommended")]
    assert {m["severity"] for m in report["messages"]} == {1}


def test_every_manifest_validates_strictly(manifests):
    assert manifests
    for doc in manifests:
        # Raises on a schema violation, an unknown field, or a kind/apiVersion that release lacks.
        kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)


def test_the_validator_is_strict_enough_to_catch_a_misspelt_field(manifests):
    """The check above is only worth something if a field a cluster would drop is refused."""
    job = copy.deepcopy(next(d for d in manifests if d["kind"] == "Job"))
    job["spec"]["template"]["spec"]["containers"][0]["envFrm"] = []
    with pytest.raises(kubernetes_validate.ValidationError, match="envFrm"):
        kubernetes_validate.validate(job, KUBE_VERSION, strict=True)


def test_the_named_tunnel_renders_and_validates(render_chart, values):
    docs = render_chart(values({"config": {"TUNNEL_HOSTNAME": "capture.example.com"}}))
    for doc in docs:
        kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)
    tunnel = next(d for d in docs if d["metadata"]["name"] == "grpo-cloudflared")
    container = tunnel["spec"]["template"]["spec"]["containers"][0]
    assert container["args"][-1] == "run"
    (token,) = container["env"]
    assert token["valueFrom"]["secretKeyRef"] == {"name": "asyncgrpo-harbor", "key": "TUNNEL_TOKEN", "optional": False}


def test_other_providers_run_no_cloudflared_and_admit_nothing_for_it(render_chart, values):
    docs = render_chart(values({"config": {"TUNNEL_PROVIDER": "gradio"}}))
    assert not [d for d in docs if "cloudflared" in d["metadata"]["name"]]
    # Policies only for what runs: nobody is admitted to the capture port (gradio's forwarder dials out
    # from inside the env-server pod), and the env server reaches no cloudflared.
    (env,) = [d for d in docs if d["kind"] == "NetworkPolicy" and d["metadata"]["name"] == "grpo-env-server"]
    assert "cloudflared" not in str(env)
    assert [r["ports"] for r in env["spec"]["ingress"]] == [[{"protocol": "TCP", "port": 8000}]]


# -- secrets -------------------------------------------------------------------------------------------

SECRET_NAMES = {"E2B_API_KEY", "HF_TOKEN", "HUB_TOKEN", "WANDB_API_KEY", "TUNNEL_TOKEN", "OPENENV_CAPTURE_ADMIN_KEY"}


def _containers(doc):
    spec = doc["spec"]["template"]["spec"] if doc["kind"] in ("Deployment", "Job") else None
    return (spec.get("initContainers", []) + spec["containers"]) if spec else []


def test_secrets_only_by_secret_key_ref(render_chart, values):
    docs = render_chart(values({"config": {"TUNNEL_HOSTNAME": "capture.example.com"}}))
    assert not [d for d in docs if d["kind"] == "Secret"], "the chart must never hold a secret's value"
    seen = set()
    for doc in docs:
        for container in _containers(doc):
            assert "envFrom" not in container
            for var in container.get("env", []):
                if var["name"] in SECRET_NAMES:
                    assert "value" not in var, f"{container['name']}: {var['name']} given as a value"
                    assert var["valueFrom"]["secretKeyRef"]["key"] == var["name"]
                    seen.add(var["name"])
    assert seen == SECRET_NAMES


# -- run name ------------------------------------------------------------------------------------------


def _run_name(docs):
    return next(d for d in docs if d["kind"] == "ConfigMap")["data"]["RUN_NAME"]


def test_a_fresh_run_name_has_the_trainers_format(manifests):
    name = _run_name(manifests)
    expected = fresh_run_name("Qwen/Qwen3-1.7B", "mini-swe-agent", 200, now=0)
    shape = re.escape(expected.rsplit("-", 2)[0]) + r"-\d{8}T\d{6}Z-[0-9a-f]{6}"
    assert re.fullmatch(shape, name), (name, expected)
    assert RUN_NAME_RE.match(name)


def test_an_explicit_run_name_is_kept_verbatim(render_chart, values):
    docs = render_chart(values({"config": {"RUN_NAME": "qwen3-resume-me"}}))
    assert _run_name(docs) == "qwen3-resume-me"
    trainer = next(d for d in docs if d["kind"] == "Job" and d["metadata"]["name"] == "grpo-trainer")
    (var,) = [v for v in trainer["spec"]["template"]["spec"]["containers"][0]["env"] if v["name"] == "RUN_NAME"]
    assert var["valueFrom"]["configMapKeyRef"] == {"name": f"{RELEASE}-run", "key": "RUN_NAME"}


# -- wrong values fail at install, with the line that names the fix ------------------------------------


@pytest.mark.parametrize(
    ("override", "error", "message"),
    [
        ({"config": {"SANDBOX": "docker"}}, helm.HelmValuesError, "at '/config/SANDBOX': value must be 'e2b'"),
        ({"config": {"MAX_STEP": 3}}, helm.HelmValuesError, "additional properties 'MAX_STEP' not allowed"),
        ({"config": {"AGENT_STEP_LIMIT": 0}}, helm.HelmValuesError, "at '/config/AGENT_STEP_LIMIT': minimum"),
        ({"config": {"CAPTURE_PORT": 70000}}, helm.HelmValuesError, "at '/config/CAPTURE_PORT': maximum"),
        ({"config": {"WEIGHT_TRANSFER": "mock"}}, helm.HelmValuesError, "at '/config/WEIGHT_TRANSFER'"),
        ({"config": {"TUNNEL_HOSTNAME": "https://x.example.com"}}, helm.HelmValuesError, "/config/TUNNEL_HOSTNAME"),
        ({"config": {"CHECKPOINT_ROOT": "/tmp/ckpt"}}, helm.HelmValuesError, "/config/CHECKPOINT_ROOT"),
        ({"config": {"BUCKET_NOT_A_MOUNT_OK": "yes"}}, helm.HelmValuesError, "/config/BUCKET_NOT_A_MOUNT_OK"),
        (
            {"bucket": {"storageClassName": ""}},
            helm.HelmRenderError,
            "the bucket is not set: give bucket.existingClaim",
        ),
        ({"trainer": {"gpus": 2}}, helm.HelmRenderError, "trainer.gpus=2 needs a TRAIN_SCRIPT"),
        ({"config": {"MAX_CONCURRENT_ENVS": 4}}, helm.HelmRenderError, "MAX_CONCURRENT_ENVS=4 is below"),
        (
            {"config": {"TUNNEL_PROVIDER": "direct"}},
            helm.HelmValuesError,
            "at '/config/TUNNEL_PROVIDER': value must be one of 'cloudflared', 'gradio'",
        ),
        (
            {"config": {"DIRECT_URL": "http://10.0.0.5:8100"}},
            helm.HelmRenderError,
            "config.DIRECT_URL is for TUNNEL_PROVIDER=direct, which this chart refuses",
        ),
        ({"config": {"ENGINE_PORT": 8100}}, helm.HelmRenderError, "must all differ"),
        ({"config": {"TUNNEL_CHECK_TIMEOUT_S": 12}}, helm.HelmRenderError, "TUNNEL_CHECK_TIMEOUT_S=12 must be below"),
        (
            {"config": {"TRIALS_MAX_GB": 20}},
            helm.HelmRenderError,
            "config.TRIALS_MAX_GB=20 must be below envServer.trialsSize=20Gi (20.0 GiB, the trials emptyDir's "
            "sizeLimit), or the kubelet evicts the env server",
        ),
        (
            {"config": {"TRIALS_MAX_GB": 9.5}, "envServer": {"trialsSize": "10G"}},
            helm.HelmRenderError,
            "config.TRIALS_MAX_GB=9.5 must be below envServer.trialsSize=10G (9.3 GiB,",
        ),
    ],
)
def test_a_wrong_value_fails_rendering_with_a_clear_message(render_chart, values, override, error, message):
    with pytest.raises(error) as caught:
        render_chart(values(override))
    assert message in str(caught.value)


@pytest.mark.parametrize("rule", [rule.name for rule in RULES])
def test_every_stop_rule_can_be_turned_off_on_kubernetes_as_in_env(render_chart, values, rule):
    """`off` disables a rule (.env.example, README); the schema once took only numbers for the fractions."""
    docs = render_chart(values({"config": {rule: "off"}}))
    trainer = next(d for d in docs if d["kind"] == "Job" and d["metadata"]["name"] == "grpo-trainer")
    (var,) = [v for v in trainer["spec"]["template"]["spec"]["containers"][0]["env"] if v["name"] == rule]
    assert var["value"] == "off"


# -- every shape the values can give, valid for the API server ------------------------------------------

SHAPES = {
    "named-tunnel": {"config": {"TUNNEL_HOSTNAME": "capture.example.com"}},
    "gradio": {"config": {"TUNNEL_PROVIDER": "gradio"}},
    "read-write-once": {"bucket": {"accessMode": "ReadWriteOnce"}},
    "existing-claim": {"bucket": {"existingClaim": "team-bucket", "storageClassName": ""}},
    "openshift": {
        "podSecurity": {"runAsUser": None, "runAsGroup": None, "fsGroup": None},
        "networkPolicy": {
            "dnsNamespace": "openshift-dns",
            "dnsPodLabels": {"dns.operator.openshift.io/daemonset-dns": "default"},
        },
    },
    "scrapers": {
        "networkPolicy": {
            "metricsScrapers": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
        }
    },
    "no-budgets": {"podDisruptionBudget": {"enabled": False}},
    "hatches": {
        "serviceAccountName": "runner",
        "engine": {
            "runtimeClassName": "nvidia",
            "priorityClassName": "high",
            "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "podLabels": {"team": "ml"},
            "podAnnotations": {"example.com/note": "x"},
            "extraEnv": [
                {"name": "HTTPS_PROXY", "value": "http://proxy:3128"},
                {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            ],
            "extraVolumes": [
                {"name": "ca", "secret": {"secretName": "corp-ca", "defaultMode": 292}},
                {"name": "s3", "csi": {"driver": "s3.csi.aws.com", "volumeAttributes": {"bucketName": "b"}}},
            ],
            "extraVolumeMounts": [{"name": "ca", "mountPath": "/etc/ca", "readOnly": True}],
            "podSecurity": {"seccompProfile": "Localhost", "localhostProfile": "profiles/vllm.json"},
        },
    },
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_every_shape_validates_strictly_and_lints(render_chart, values, shape):
    docs = render_chart(values(SHAPES[shape]))
    for doc in docs:
        kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)
    report = helm.lint(str(CHART), values(SHAPES[shape]), strict=True, kube_version=f"v{KUBE_VERSION}")
    assert report["errors"] == [], report


@pytest.mark.parametrize(
    "override",
    [
        {"config": {"TRIALS_MAX_GB": 0}},  # no size cap: TRIALS_KEEP alone bounds the folders
        {"config": {"TRIALS_MAX_GB": 0.4}, "envServer": {"trialsSize": "500Mi"}},
        {"config": {"TRIALS_MAX_GB": 1000}, "envServer": {"trialsSize": "1.5Ti"}},
    ],
)
def test_a_trials_cap_below_the_folders_size_renders(render_chart, values, override):
    assert render_chart(values(override))
