"""The bucket's storage rule at render time: ReadWriteMany, or ReadWriteOnce with the trainer on the
engine's node; never a claim two pods cannot share. What only a cluster shows: an existing claim's real
access modes (read with `lookup` at install, empty offline) and whether a class can serve ReadWriteMany."""

from __future__ import annotations

import helm_python as helm
import pytest
from unit.helm.helm_render import merged, render
from unit.helm.pod_security import pod_specs


def _pvc(docs):
    (pvc,) = [d for d in docs if d["kind"] == "PersistentVolumeClaim"]
    return pvc


def test_read_write_many_lets_engine_and_trainer_run_anywhere():
    docs = render(merged())
    assert _pvc(docs)["spec"]["accessModes"] == ["ReadWriteMany"]
    assert "affinity" not in dict(pod_specs(docs))["grpo-trainer"]


def test_read_write_once_puts_the_trainer_on_the_engines_node():
    docs = render(merged({"bucket": {"accessMode": "ReadWriteOnce"}}))
    assert _pvc(docs)["spec"]["accessModes"] == ["ReadWriteOnce"]
    pods = dict(pod_specs(docs))
    (term,) = pods["grpo-trainer"]["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    engine = next(d for d in docs if d["kind"] == "Job" and d["metadata"]["name"] == "grpo-engine")
    labels = engine["spec"]["template"]["metadata"]["labels"]
    assert term["labelSelector"]["matchLabels"] == {
        "app.kubernetes.io/instance": "grpo",
        "app.kubernetes.io/component": "engine",
    }
    assert labels.items() >= term["labelSelector"]["matchLabels"].items()
    # Both pods that mount the bucket mount that claim.
    for name in ("grpo-engine", "grpo-trainer"):
        (vol,) = [v for v in pods[name]["volumes"] if v["name"] == "bucket"]
        assert vol["persistentVolumeClaim"]["claimName"] == "grpo-bucket"


def test_read_write_once_keeps_the_users_node_affinity():
    node = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": []}]}}
    docs = render(merged({"bucket": {"accessMode": "ReadWriteOnce"}, "trainer": {"affinity": {"nodeAffinity": node}}}))
    affinity = dict(pod_specs(docs))["grpo-trainer"]["affinity"]
    assert affinity["nodeAffinity"] == node and "podAffinity" in affinity


@pytest.mark.parametrize(
    ("override", "error", "message"),
    [
        ({"bucket": {"accessMode": "ReadWriteOncePod"}}, helm.HelmValuesError, "/bucket/accessMode"),
        ({"bucket": {"accessMode": "ReadOnlyMany"}}, helm.HelmValuesError, "/bucket/accessMode"),
        (
            {
                "bucket": {"accessMode": "ReadWriteOnce"},
                "trainer": {"affinity": {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}},
            },
            helm.HelmRenderError,
            "trainer.affinity.podAffinity would replace it",
        ),
    ],
)
def test_a_bucket_two_pods_cannot_share_is_refused(override, error, message):
    with pytest.raises(error, match=message):
        render(merged(override))
