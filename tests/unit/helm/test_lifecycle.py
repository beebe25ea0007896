"""Install, restart and upgrade: one run name per release, Job templates that an upgrade leaves alone,
the engine never restarted (compose's rule), sandboxes named per namespace and release, a configurable
trainer grace, and disruption budgets. What only a cluster shows: the upgrade-time refusal of a changed
Job template (it reads the live Job with `lookup`, which is empty offline) and a real drain."""

from __future__ import annotations

import re

from unit.helm.helm_render import merged, render, render_text

TRAINER = "grpo-trainer"


def _doc(docs, kind, name):
    (doc,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


def _notes_run_name(out):
    notes = next(text for path, text in out.items() if path.endswith("NOTES.txt"))
    return re.match(r"grpo: run (\S+)", notes).group(1)


def test_notes_print_the_run_name_the_configmap_holds():
    out = render_text(merged())
    cm = next(text for path, text in out.items() if path.endswith("storage.yaml"))
    (held,) = re.findall(r'RUN_NAME: "([^"]+)"', cm)
    assert _notes_run_name(out) == held


def test_an_explicit_run_name_makes_template_output_stable():
    """`helm template` (GitOps) has no cluster to remember a fresh name in: with config.RUN_NAME set, two
    renders are byte-identical; without it only the ConfigMap and NOTES differ (README: set RUN_NAME)."""
    pinned = merged({"config": {"RUN_NAME": "qwen3-grpo-1"}})
    assert render_text(pinned) == render_text(merged({"config": {"RUN_NAME": "qwen3-grpo-1"}}))
    first, second = render_text(merged()), render_text(merged())
    differ = {path.rsplit("/", 1)[-1] for path in first if first[path] != second[path]}
    assert differ <= {"storage.yaml", "NOTES.txt"}


def test_job_templates_do_not_change_with_the_run_the_revision_or_the_chart_version():
    a = render(merged())
    b = render(merged({"config": {"RUN_NAME": "another-run"}}))
    for name in ("grpo-engine", "grpo-trainer"):
        job_a, job_b = _doc(a, "Job", name), _doc(b, "Job", name)
        assert job_a["spec"]["template"] == job_b["spec"]["template"], name
        assert job_a["metadata"]["annotations"] == job_b["metadata"]["annotations"], name
        labels = job_a["spec"]["template"]["metadata"]["labels"]
        assert not {k for k in labels if k.startswith("helm.sh/")}, (
            "the chart's version must not be in a Job's template"
        )
        assert "app.kubernetes.io/version" not in labels


def test_the_template_hash_follows_the_template_only():
    base = render(merged())
    lr = render(merged({"config": {"LEARNING_RATE": "2e-6"}}))
    tmp = render(merged({"envServer": {"tmpSize": "4Gi"}}))

    def hashes(docs):
        return {
            n: _doc(docs, "Job", n)["metadata"]["annotations"]["asyncgrpo-harbor/pod-template"]
            for n in ("grpo-engine", "grpo-trainer")
        }

    # LEARNING_RATE is in the trainer's env and in preflight's (the engine pod checks every setting).
    assert hashes(lr)["grpo-trainer"] != hashes(base)["grpo-trainer"]
    assert hashes(lr)["grpo-engine"] != hashes(base)["grpo-engine"]
    assert hashes(tmp) == hashes(base)
    assert all(re.fullmatch(r"[0-9a-f]{16}", h) for h in hashes(base).values())


def test_the_engine_is_never_restarted():
    docs = render(merged())
    engine = _doc(docs, "Job", "grpo-engine")
    assert engine["spec"]["backoffLimit"] == 0
    assert engine["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    assert not [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "grpo-engine"]
    # No liveness probe anywhere: compose restarts nothing on unhealthy.
    for doc in (d for d in docs if d["kind"] in ("Deployment", "Job")):
        pod = doc["spec"]["template"]["spec"]
        for c in pod.get("initContainers", []) + pod["containers"]:
            assert "livenessProbe" not in c, (doc["metadata"]["name"], c["name"])


def _stack_name(docs):
    (dep,) = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"].endswith("-env-server")]
    env = dep["spec"]["template"]["spec"]["containers"][0]["env"]
    return next(v["value"] for v in env if v["name"] == "STACK_NAME")


def test_stack_name_is_unique_per_namespace_and_release():
    ml, team = render(merged(), namespace="ml"), render(merged(), namespace="team-b")
    assert _stack_name(ml) != _stack_name(team)
    assert _stack_name(ml) == _stack_name(render(merged(), namespace="ml"))
    assert re.fullmatch(r"grpo-[0-9a-f]{6}", _stack_name(ml))
    long = render(merged(), name="a" * 53)
    assert re.fullmatch(r"[a-z0-9][a-z0-9-]{0,39}", _stack_name(long))
    assert _stack_name(render(merged({"config": {"STACK_NAME": "mine"}}))) == "mine"


def test_trainer_grace_is_configurable():
    docs = render(merged({"trainer": {"terminationGracePeriodSeconds": 900}}))
    assert _doc(docs, "Job", TRAINER)["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 900
    assert _doc(render(merged()), "Job", TRAINER)["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 300


def test_disruption_budgets_hold_the_stateful_pods():
    docs = render(merged())
    pods = {
        d["metadata"]["name"]: d["spec"]["template"]["metadata"]["labels"]
        for d in docs
        if d["kind"] in ("Deployment", "Job")
    }
    budgets = {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "PodDisruptionBudget"}
    assert set(budgets) == {"grpo-engine", "grpo-env-server", "grpo-trainer"}
    for name, spec in budgets.items():
        assert spec["maxUnavailable"] == 0
        selected = [p for p, labels in pods.items() if labels.items() >= spec["selector"]["matchLabels"].items()]
        assert selected == [name]
    assert not [
        d for d in render(merged({"podDisruptionBudget": {"enabled": False}})) if d["kind"] == "PodDisruptionBudget"
    ]
