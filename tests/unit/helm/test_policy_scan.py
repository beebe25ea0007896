"""An offline policy scan (checkov, pinned in constraints.txt, in its own venv: requirements/policy-scan.txt)
over the default render, the named-tunnel render and a render with every escape hatch set. Each finding
that remains is on the allow-list below with the reason it stays; a new finding fails, and so does an
allow-list entry that no longer fires (a stale reason is a wrong document).

checkov runs with --skip-download (its guideline links are fetched otherwise); nothing else it does needs
the network. About 4 s for the three renders on this machine.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess

import pytest
import yaml
from unit.helm.helm_render import ROOT, merged, render

CHECKOV = ROOT / ".venv/checkov/bin/checkov"

# check id -> why it stays. Each one is a decision, not an oversight.
ALLOWED = {
    "CKV_K8S_8": (
        "Liveness probes on engine, env-server and cloudflared: none on purpose. compose restarts none of them on "
        "unhealthy, and a liveness kill of vLLM would restart it with base weights outside the trainer's "
        "weight-transfer group; readiness (the same health commands) gates traffic and the trainer's start."
    ),
    "CKV_K8S_11": (
        "CPU limits: none on purpose. CFS quota throttles NCCL's and vLLM's busy-polling threads in bursts "
        "(stalls far longer than the saved CPU time); CPU requests give each pod its share, memory limits "
        "protect the node."
    ),
    "CKV_K8S_15": (
        "imagePullPolicy IfNotPresent by default: images.tag defaults to `local` (the images `docker compose "
        "build` made, for a cluster that shares that image store), which Always would fail to pull; "
        "images.pullPolicy=Always is one value away."
    ),
    "CKV_K8S_35": (
        "Secrets as environment variables: the services read E2B_API_KEY, HF_TOKEN, HUB_TOKEN, WANDB_API_KEY, "
        "TUNNEL_TOKEN and OPENENV_CAPTURE_ADMIN_KEY from their environment (as under compose), by "
        "secretKeyRef, never as values in the chart."
    ),
    "CKV_K8S_43": (
        "Image digests: the chart's images are the user's own build (images.registry + images.tag, no "
        "digest is known to the chart); cloudflared accepts a digest (images.cloudflared: name:tag@sha256:...)."
    ),
}

TUNNEL = {"config": {"TUNNEL_HOSTNAME": "capture.example.com"}}
HATCH = {
    "runtimeClassName": "nvidia",
    "priorityClassName": "training-high",
    "podLabels": {"team": "ml"},
    "extraEnv": [{"name": "HTTPS_PROXY", "value": "http://proxy.corp:3128"}],
    "extraVolumes": [{"name": "corp-ca", "configMap": {"name": "corp-ca"}}],
    "extraVolumeMounts": [{"name": "corp-ca", "mountPath": "/etc/corp-ca", "readOnly": True}],
}


def _renders():
    hatches = merged(TUNNEL, {"serviceAccountName": "grpo-runner"})
    for comp in ("engine", "envServer", "cloudflared", "trainer"):
        hatches[comp] = copy.deepcopy(HATCH)
    return {"default": render(), "named-tunnel": render(merged(TUNNEL)), "escape-hatches": render(hatches)}


def _weakened() -> list[dict]:
    """The default render with the trainer pod opened up: what the scan must catch."""
    docs = render()
    pod = next(d for d in docs if d["kind"] == "Job")["spec"]["template"]["spec"]
    pod["containers"][0]["securityContext"].update(privileged=True, allowPrivilegeEscalation=True)
    pod["securityContext"].update(runAsUser=0, runAsNonRoot=False)
    return docs


@pytest.fixture(scope="module")
def scan(tmp_path_factory) -> dict[str, dict[str, set[str]]]:
    """render -> check id -> the resources it failed on; one checkov run for every render."""
    if not CHECKOV.exists():
        pytest.fail(f"{CHECKOV} is missing: scripts/test installs checkov into its own venv (scripts/lib.sh)")
    folder = tmp_path_factory.mktemp("policy-scan")
    for name, docs in {**_renders(), "weakened": _weakened()}.items():
        (folder / f"{name}.yaml").write_text(yaml.safe_dump_all(docs))
    out = subprocess.run(
        # "-d ." from inside the folder: checkov 3.3.30 skips every file under a hidden folder of an absolute
        # -d path, and scripts/test's TMPDIR is <repo>/.run/tmp (measured: 0 resources scanned).
        [str(CHECKOV), "-d", ".", "--framework", "kubernetes", "--quiet", "--compact"]
        + ["-o", "json", "--skip-download"],
        cwd=folder,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        # No update check against PyPI at every run (it waits for its timeout where PyPI is not reached).
        env={**os.environ, "CKV_SKIP_PACKAGE_UPDATE_CHECK": "true"},
    )
    # checkov exits 1 when any check fails; its JSON report is what counts.
    assert out.returncode in (0, 1), out.stderr[-2000:]
    reports = json.loads(out.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    assert [r["summary"]["parsing_errors"] for r in reports] == [0]
    assert reports[0]["summary"]["passed"] > 300, reports[0]["summary"]
    failed: dict[str, dict[str, set[str]]] = {}
    for check in reports[0]["results"]["failed_checks"]:
        render_name = check["file_path"].rsplit("/", 1)[-1].removesuffix(".yaml")
        failed.setdefault(render_name, {}).setdefault(check["check_id"], set()).add(check["resource"])
    return failed


@pytest.mark.parametrize("render_name", ["default", "named-tunnel", "escape-hatches"])
def test_policy_scan_finds_only_what_is_allowed_and_why(scan, render_name):
    failed = scan[render_name]
    unexpected = {k: sorted(v) for k, v in failed.items() if k not in ALLOWED}
    assert not unexpected, f"new policy findings (fix them, or allow-list each with its reason): {unexpected}"
    assert set(failed) == set(ALLOWED), f"allow-list entries that no longer fire: {set(ALLOWED) - set(failed)}"


def test_the_scan_catches_a_weakened_pod(scan):
    """The scan is only worth something if it fails on what this chart guards against: privileged,
    escalation, root, a low UID."""
    assert {"CKV_K8S_16", "CKV_K8S_20", "CKV_K8S_23", "CKV_K8S_40"} <= set(scan["weakened"]) - set(ALLOWED)


def test_the_scan_is_the_pinned_one():
    pins = dict(
        line.split("==")
        for line in (ROOT / "requirements/constraints.txt").read_text().splitlines()
        if line and not line.startswith("#")
    )
    lock = dict(
        line.split("==")
        for line in (ROOT / "requirements/policy-scan.lock").read_text().splitlines()
        if line and not line.startswith("#")
    )
    assert lock["checkov"] == pins["checkov"]
    python = CHECKOV.parent / "python"
    version = subprocess.run(
        [str(python), "-c", "from checkov.version import version; print(version)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert version == pins["checkov"]
