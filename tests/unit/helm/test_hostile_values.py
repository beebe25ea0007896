"""Hostile or careless values cannot turn the chart into something else.

Every string the chart takes (each string leaf of values.yaml, plus the list and map slots that are empty by
default) gets a value that tries to add fields with a newline or to break out of a quoted scalar. Each one
must either be refused (the schema, or a template's `fail`) or render into the same set of objects with no
new field: no privileged container, no hostPath (or any volume type outside Pod Security "restricted"),
no host namespace, no added capability, and no key the payload spelt. Then some values that are not
injections but would still weaken the pods or the network are refused by name.
"""

from __future__ import annotations

import atexit
import copy
import functools
import shutil
import tempfile
from pathlib import Path

import helm_python as helm
import pytest
import yaml
from unit.helm.helm_render import CHART, REQUIRED, render, render_text
from unit.helm.pod_security import RESTRICTED_VOLUMES, pod_specs, restricted_violations

MARK = "injectedbyvalue"
PAYLOADS = {
    # A new sibling field and a new block at the pod level, as a bare (unquoted) scalar would take them.
    "newline": f"x\n  securityContext:\n    privileged: true\n  hostNetwork: true\n  {MARK}: 1\n",
    # Closing a double-quoted scalar, then the same.
    "quote": f'x"\n  hostPID: true\n  {MARK}: "1',
    # A volume, for the templates where a string lands in a volume's block.
    "volume": f"1Gi\n  hostPath:\n    path: /\n{MARK}: 1",
}


def _keys(node, path=""):
    if isinstance(node, dict):
        for key, value in node.items():
            yield f"{path}/{key}", key
            yield from _keys(value, f"{path}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _keys(value, f"{path}/{i}")


def assert_contained(docs: list[dict]) -> None:
    """The properties no value may take away."""
    for name, pod in pod_specs(docs):
        for field in ("hostNetwork", "hostPID", "hostIPC"):
            assert not pod.get(field), f"{name}: {field}"
        assert pod.get("hostUsers", False) is False or pod.get("hostUsers") is None, f"{name}: hostUsers"
        for volume in pod.get("volumes", []):
            kinds = set(volume) - {"name"}
            assert kinds <= RESTRICTED_VOLUMES, f"{name}: volume {volume}"
        for container in pod.get("initContainers", []) + pod["containers"]:
            ctx = container.get("securityContext") or {}
            assert not ctx.get("privileged"), f"{name}/{container['name']}: privileged"
            assert not (ctx.get("capabilities") or {}).get("add"), f"{name}/{container['name']}: capabilities.add"
            assert ctx.get("allowPrivilegeEscalation") is not True, f"{name}/{container['name']}: escalation"
            assert "hostPort" not in str(container.get("ports", [])), f"{name}/{container['name']}: hostPort"
    for doc in docs:
        for path, key in _keys(doc):
            # A key holding the whole payload is the value kept as data (a map key the user named); a key
            # that IS the payload's field name means the value was parsed as YAML.
            assert key != MARK, f"{doc['kind']}/{doc['metadata']['name']}: the payload made a field: {path}"


def _identity(docs):
    return sorted((d["kind"], d["metadata"]["name"]) for d in docs)


BASELINE = render()


def test_the_default_render_is_contained():
    assert_contained(BASELINE)


def test_the_checker_catches_each_escape():
    """assert_contained is only worth something if each thing it looks for makes it fail."""
    base = copy.deepcopy(BASELINE)
    job = next(d for d in base if d["kind"] == "Job")
    pod = job["spec"]["template"]["spec"]
    escapes = [
        lambda p: p.update(hostNetwork=True),
        lambda p: p.update(hostPID=True),
        lambda p: p.update(hostIPC=True),
        lambda p: p["volumes"].append({"name": "root", "hostPath": {"path": "/"}}),
        lambda p: p["containers"][0].update(securityContext={"privileged": True}),
        lambda p: p["containers"][0].update(securityContext={"capabilities": {"add": ["SYS_ADMIN"]}}),
        lambda p: p["containers"][0].update(securityContext={"allowPrivilegeEscalation": True}),
        lambda p: p.update({MARK: 1}),
    ]
    for escape in escapes:
        broken = copy.deepcopy(base)
        escape(next(d for d in broken if d["kind"] == "Job")["spec"]["template"]["spec"])
        with pytest.raises(AssertionError):
            assert_contained(broken)
    assert pod == job["spec"]["template"]["spec"]


# -- newline and quote injection into every string value -------------------------------------------------

DEFAULTS = yaml.safe_load((Path(CHART) / "values.yaml").read_text())

# Slots that hold no string by default (empty lists and maps) but take one.
EMPTY_SLOTS = {
    ("images", "pullSecrets", 0): [],
    ("bucket", "existingClaim"): None,
    ("networkPolicy", "except", 0): None,
    ("networkPolicy", "dnsPodLabels", "k8s-app"): {},
    ("engine", "nodeSelector", "pool"): {},
    ("engine", "tolerations", 0, "key"): [],
    ("engine", "tolerations", 0, "value"): [],
    ("trainer", "nodeSelector", "pool"): {},
    ("envServer", "nodeSelector", "pool"): {},
    ("cloudflared", "nodeSelector", "pool"): {},
    ("engine", "podAnnotations", "note"): {},
    ("trainer", "podLabels", "team"): {},
    ("envServer", "affinity", "nodeAffinity"): {},
}

# The escape hatches' strings, each inside an otherwise valid entry.
HATCHES = {
    "extraEnv.value": lambda p: {"engine": {"extraEnv": [{"name": "HTTPS_PROXY", "value": p}]}},
    "extraEnv.secretKeyRef": lambda p: {
        "trainer": {"extraEnv": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": p, "key": "k"}}}]}
    },
    "extraVolumes.configMap": lambda p: {"engine": {"extraVolumes": [{"name": "ca", "configMap": {"name": p}}]}},
    "extraVolumes.emptyDir": lambda p: {"engine": {"extraVolumes": [{"name": "s", "emptyDir": {"sizeLimit": p}}]}},
    "extraVolumeMounts.mountPath": lambda p: {"envServer": {"extraVolumeMounts": [{"name": "tmp", "mountPath": p}]}},
    "extraVolumeMounts.subPath": lambda p: {
        "envServer": {"extraVolumeMounts": [{"name": "tmp", "mountPath": "/x", "subPath": p}]}
    },
    "podSecurity.localhostProfile": lambda p: {"podSecurity": {"seccompProfile": "Localhost", "localhostProfile": p}},
    "csi.volumeAttributes": lambda p: {
        "trainer": {"extraVolumes": [{"name": "b", "csi": {"driver": "s3.csi.aws.com", "volumeAttributes": {"a": p}}}]}
    },
}


def _string_leaves(node, path=()):
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _string_leaves(value, (*path, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _string_leaves(value, (*path, i))
    elif isinstance(node, str):
        yield path


SLOTS = sorted({*_string_leaves(DEFAULTS), *EMPTY_SLOTS}, key=str)


def _with(path, value):
    values = copy.deepcopy({**DEFAULTS, **{k: {**DEFAULTS[k], **v} for k, v in REQUIRED.items()}})
    node = values
    for i, key in enumerate(path[:-1]):
        nxt = path[i + 1]
        if isinstance(node, list):
            while len(node) <= key:
                node.append({} if not isinstance(nxt, int) else [])
            node = node[key]
            continue
        if key not in node or node[key] is None or node[key] in ({}, []):
            node[key] = [] if isinstance(nxt, int) else {}
        node = node[key]
    last = path[-1]
    if isinstance(node, list):
        while len(node) <= last:
            node.append(None)
    node[last] = value
    return values


@functools.cache
def _schemaless_chart():
    """The chart without values.schema.json: the templates' own quoting, with no schema in front of it."""
    folder = Path(tempfile.mkdtemp(prefix="agh-schemaless-")) / "chart"
    atexit.register(shutil.rmtree, folder.parent, True)
    shutil.copytree(CHART, folder)
    (folder / "values.schema.json").unlink()
    return helm.Chart.load(str(folder)).__enter__()


def _render_or_refuse(values, schema=True, **kw):
    """The manifests, or None when the chart refused the values (schema or template `fail`)."""
    try:
        if schema:
            out = render_text(values, **kw)
        else:
            out = _schemaless_chart().render(values, name="grpo", namespace="ml")
    except (helm.HelmValuesError, helm.HelmRenderError):
        return None
    docs = []
    for path, text in sorted(out.items()):
        if not path.endswith("NOTES.txt"):
            # A YAML error here is itself a finding: the value broke the document's structure.
            docs += [d for d in yaml.load_all(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) if d]
    return docs


@pytest.mark.parametrize("payload", sorted(PAYLOADS))
@pytest.mark.parametrize("path", SLOTS, ids=lambda p: ".".join(map(str, p)))
def test_an_injected_string_is_refused_or_stays_a_string(path, payload):
    docs = _render_or_refuse(_with(path, PAYLOADS[payload]))
    if docs is None:
        return
    assert_contained(docs)
    assert _identity(docs) == _identity(BASELINE), "the value added or removed an object"
    for name, pod in pod_specs(docs):
        assert restricted_violations(pod) == [], name


@pytest.mark.parametrize("path", SLOTS, ids=lambda p: ".".join(map(str, p)))
def test_the_templates_keep_an_injected_string_a_string_even_without_the_schema(path):
    """Defence in depth: the schema refuses control characters, but each template must also render every
    user string through quote/toYaml, so a newline stays inside its value (or the template refuses it)."""
    docs = _render_or_refuse(_with(path, PAYLOADS["newline"]), schema=False)
    if docs is None:
        return
    assert_contained(docs)
    # Two values choose what runs (a claim of the user's instead of the chart's; no cloudflared for another
    # provider): those may only remove objects, never add one.
    if path in (("bucket", "existingClaim"), ("config", "TUNNEL_PROVIDER")):
        assert set(_identity(docs)) < set(_identity(BASELINE))
    else:
        assert _identity(docs) == _identity(BASELINE), "the value added or removed an object"


@pytest.mark.parametrize("payload", sorted(PAYLOADS))
@pytest.mark.parametrize("hatch", sorted(HATCHES))
def test_an_injected_escape_hatch_string_is_refused_or_stays_a_string(hatch, payload):
    override = HATCHES[hatch](PAYLOADS[payload])
    values = {**REQUIRED, **override}
    docs = _render_or_refuse(values)
    if docs is None:
        return
    assert_contained(docs)
    assert _identity(docs) == _identity(BASELINE)
    for name, pod in pod_specs(docs):
        assert restricted_violations(pod) == [], name


def test_every_string_slot_is_exercised():
    """New string values get the injection tests by being in values.yaml; this guards the walk itself."""
    names = {".".join(map(str, p)) for p in SLOTS}
    for expected in (
        "images.registry",
        "images.tag",
        "images.cloudflared",
        "engine.shmSize",
        "trainer.shmSize",
        "bucket.size",
        "gpuResource",
        "networkPolicy.internetCIDR",
        "networkPolicy.dnsNamespace",
        "secret.name",
        "config.MODEL",
        "config.TASK_ENV_ALLOW",
        "config.STACK_NAME",
    ):
        assert expected in names
    assert len(SLOTS) >= 60


# -- values that are not injections but would still open something -------------------------------------


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"networkPolicy": {"except": []}}, "/networkPolicy/except"),
        ({"networkPolicy": {"except": ["10.0.0.0/8"]}}, "/networkPolicy/except"),
        ({"networkPolicy": {"internetCIDR": "0.0.0.0/0 "}}, "/networkPolicy/internetCIDR"),
        ({"networkPolicy": {"except": ["169.254.0.0/16", "10.0.0.0/33"]}}, "/networkPolicy/except/1"),
        ({"gpuResource": "nvidia.com/gpu: 8\n  privileged"}, "/gpuResource"),
        ({"config": {"ENGINE_PORT": "8001\n  hostNetwork: true"}}, "/config/ENGINE_PORT"),
        ({"config": {"CAPTURE_MAX_BODY_MB": 100000}}, "'/config/CAPTURE_MAX_BODY_MB': maximum: got 100,000, want 64"),
        (
            {"config": {"CAPTURE_MAX_CONCURRENT": 5000}},
            "'/config/CAPTURE_MAX_CONCURRENT': maximum: got 5,000, want 1,024",
        ),
        ({"config": {"TASK_ENV_ALLOW": "*"}}, "/config/TASK_ENV_ALLOW"),
        ({"config": {"TASK_ENV_ALLOW": "PATH,AWS_*"}}, "/config/TASK_ENV_ALLOW"),
        ({"config": {"TASK_ENV_ALLOW": "HF_TOKEN"}}, "config.TASK_ENV_ALLOW names HF_TOKEN, which looks like a secret"),
        ({"config": {"TASK_ENV_ALLOW": "PATH, E2B_API_KEY"}}, "names E2B_API_KEY, which looks like a secret"),
        ({"config": {"TASK_ENV_ALLOW": "WANDB_API_KEY"}}, "names WANDB_API_KEY"),
        ({"config": {"TASK_ENV_ALLOW": "HUB_TOKEN"}}, "names HUB_TOKEN"),
        ({"config": {"TASK_ENV_ALLOW": "LANG,AWS_SECRET_ACCESS_KEY"}}, "names AWS_SECRET_ACCESS_KEY"),
        ({"config": {"TASK_ENV_ALLOW": "DB_PASSWORD"}}, "names DB_PASSWORD"),
        ({"config": {"TASK_ENV_ALLOW": "GITHUB_TOKEN"}}, "names GITHUB_TOKEN"),
        ({"bucket": {"size": "0"}}, "/bucket/size"),
        ({"bucket": {"size": "0Gi"}}, "/bucket/size"),
        ({"engine": {"shmSize": "lots"}}, "/engine/shmSize"),
        ({"secret": {"name": "My_Secret"}}, "/secret/name"),
        ({"bucket": {"existingClaim": "claim\nx"}}, "/bucket/existingClaim"),
        ({"images": {"tag": "local\n"}}, "/images/tag"),
        ({"images": {"registry": "registry.example.com"}}, "/images/registry"),
        ({"engine": {"tolerations": [{"key": "a", "operator": "Exists", "hostPath": "/"}]}}, "/engine/tolerations/0"),
        ({"engine": {"nodeSelector": {"pool\nx": "gpu"}}}, "invalid propertyName 'pool\\nx'"),
        ({"networkPolicy": {"dnsPodLabels": {"k8s-app": "kube-dns\n  x: y"}}}, "/networkPolicy/dnsPodLabels"),
        ({"config": {"DIRECT_URL": "http://10.0.0.5:8100\nx"}}, "/config/DIRECT_URL"),
        # DNS egress: DNS ports only, single addresses only, never a metadata or credential address (issue 40).
        ({"networkPolicy": {"dnsPorts": [53, 80]}}, "/networkPolicy/dnsPorts/1"),
        ({"networkPolicy": {"dnsIPs": ["169.254.169.254/32"]}}, "/networkPolicy/dnsIPs/0"),
        ({"networkPolicy": {"dnsIPs": ["169.254.170.2/32"]}}, "/networkPolicy/dnsIPs/0"),
        ({"networkPolicy": {"dnsIPs": ["fd00:ec2::254/128"]}}, "/networkPolicy/dnsIPs/0"),
        ({"networkPolicy": {"dnsIPs": ["0.0.0.0/0"]}}, "/networkPolicy/dnsIPs/0"),
        ({"networkPolicy": {"dnsIPs": ["169.254.0.0/16"]}}, "/networkPolicy/dnsIPs/0"),
        # The egress exceptions keep the whole link-local range (metadata and credential endpoints), not one /32.
        ({"networkPolicy": {"except": ["169.254.169.254/32", "10.0.0.0/8"]}}, "/networkPolicy/except"),
        # Scrapers must select something: {} (or empty labels) is every namespace, or every pod.
        ({"networkPolicy": {"metricsScrapers": [{"namespaceSelector": {}}]}}, "/networkPolicy/metricsScrapers/0"),
        (
            {"networkPolicy": {"metricsScrapers": [{"namespaceSelector": {"matchLabels": {}}}]}},
            "/networkPolicy/metricsScrapers/0/namespaceSelector/matchLabels",
        ),
        ({"networkPolicy": {"metricsScrapers": [{"podSelector": {}}]}}, "/networkPolicy/metricsScrapers/0"),
        # Root only with its named opt-in, globally or for one component.
        ({"podSecurity": {"runAsUser": 0}}, "podSecurity would run this pod as root (runAsNonRoot=true, runAsUser=0)"),
        ({"podSecurity": {"runAsNonRoot": False}}, "podSecurity would run this pod as root (runAsNonRoot=false"),
        ({"engine": {"podSecurity": {"runAsUser": 0}}}, "podSecurity would run this pod as root"),
        # No Secret reaches the internet-facing cloudflared pod as a volume.
        (
            {"cloudflared": {"extraVolumes": [{"name": "creds", "secret": {"secretName": "aws"}}]}},
            "/cloudflared/extraVolumes",
        ),
        (
            {"cloudflared": {"extraVolumes": [{"name": "creds", "projected": {"sources": []}}]}},
            "/cloudflared/extraVolumes",
        ),
        # A secret-looking name in extraEnv takes valueFrom.secretKeyRef, never a plain value.
        (
            {"trainer": {"extraEnv": [{"name": "AWS_SECRET_ACCESS_KEY", "value": "abc"}]}},
            "extraEnv sets AWS_SECRET_ACCESS_KEY as a plain value, and its name says it holds a secret (plain values "
            "land in the pod spec, readable by anyone who may read pods): keep it in a Secret and use "
            "valueFrom.secretKeyRef",
        ),
        ({"envServer": {"extraEnv": [{"name": "GITHUB_TOKEN", "value": "ghp_x"}]}}, "extraEnv sets GITHUB_TOKEN as a"),
        ({"cloudflared": {"extraEnv": [{"name": "db_password", "value": "x"}]}}, "extraEnv sets db_password as a"),
    ],
)
def test_a_weakening_value_is_refused_by_name(override, message):
    values = {**REQUIRED, **override}
    if "bucket" in override:
        values["bucket"] = {**REQUIRED["bucket"], **override["bucket"]}
    if "networkPolicy" in override:
        values["networkPolicy"] = {**REQUIRED.get("networkPolicy", {}), **override["networkPolicy"]}
    with pytest.raises((helm.HelmValuesError, helm.HelmRenderError)) as caught:
        render(values)
    assert message in str(caught.value)


@pytest.mark.parametrize("name", ["1grpo", "grpo.v2"])
def test_a_release_name_that_cannot_name_a_service_is_refused(name):
    with pytest.raises(helm.HelmRenderError, match="cannot name this chart's Services"):
        render({**REQUIRED}, name=name)


@pytest.mark.parametrize("allowed", ["", "LANG", "PATH, LANG,TZ", "HF_HUB_OFFLINE,KEYBOARD_LAYOUT"])
def test_harmless_task_env_names_are_accepted(allowed):
    docs = render({**REQUIRED, "config": {"TASK_ENV_ALLOW": allowed}})
    env = next(d for d in docs if d["metadata"]["name"] == "grpo-env-server" and d["kind"] == "Deployment")
    (var,) = [v for v in env["spec"]["template"]["spec"]["containers"][0]["env"] if v["name"] == "TASK_ENV_ALLOW"]
    assert var["value"] == allowed


# -- the escape hatches that stay open, used as meant (issue 40) -----------------------------------------


@pytest.mark.parametrize(
    "override",
    [
        {"networkPolicy": {"dnsIPs": ["169.254.20.10/32", "10.96.0.10/32"], "dnsPorts": [53, 5353]}},
        {"networkPolicy": {"except": ["169.254.0.0/16", "10.0.0.0/8"]}},
        {
            "networkPolicy": {
                "metricsScrapers": [
                    {
                        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
                        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
                    }
                ]
            }
        },
        {"podSecurity": {"runAsUser": 0, "allowRunAsRoot": True}},
        {"cloudflared": {"extraVolumes": [{"name": "scratch", "emptyDir": {}}]}},
        {
            "trainer": {
                "extraEnv": [
                    {"name": "AWS_SECRET_ACCESS_KEY", "valueFrom": {"secretKeyRef": {"name": "aws", "key": "k"}}}
                ]
            }
        },
        {"trainer": {"extraEnv": [{"name": "HTTPS_PROXY", "value": "http://proxy:3128"}]}},
    ],
)
def test_the_hatches_used_as_meant_still_render(override):
    values = {**REQUIRED, **override}
    if "networkPolicy" in override:
        values["networkPolicy"] = {**REQUIRED.get("networkPolicy", {}), **override["networkPolicy"]}
    assert render(values)
