"""DNS that works where cluster DNS is not plain kube-dns, a named tunnel whose route reaches the capture
Service, and scraping that opens one port to one named peer. What only a cluster shows: that the CNI
enforces NetworkPolicy at all, and that Cloudflare's route for the hostname is the URL printed here."""

from __future__ import annotations

import pytest
from unit.helm.helm_render import merged, render, render_text


def _policy(docs, name):
    (doc,) = [d for d in docs if d["kind"] == "NetworkPolicy" and d["metadata"]["name"] == name]
    return doc["spec"]


def test_dns_defaults_allow_kube_dns_openshift_ports_and_nodelocal_dns():
    (pods, nodelocal) = _policy(render(), "grpo-dns")["egress"]
    assert pods["to"] == [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
        }
    ]
    ports = [{"protocol": p, "port": n} for n in (53, 5353) for p in ("UDP", "TCP")]
    assert pods["ports"] == ports
    assert nodelocal == {"to": [{"ipBlock": {"cidr": "169.254.20.10/32"}}], "ports": ports}


def test_user_dns_labels_replace_the_default_instead_of_merging():
    openshift = {
        "networkPolicy": {
            "dnsNamespace": "openshift-dns",
            "dnsPodLabels": {"dns.operator.openshift.io/daemonset-dns": "default"},
            "dnsIPs": [],
        }
    }
    (pods,) = _policy(render(merged(openshift)), "grpo-dns")["egress"]
    assert pods["to"][0]["podSelector"] == {"matchLabels": {"dns.operator.openshift.io/daemonset-dns": "default"}}
    assert pods["to"][0]["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "openshift-dns"}}


def test_nodelocal_dns_in_iptables_mode_takes_the_service_ip():
    docs = render(merged({"networkPolicy": {"dnsIPs": ["169.254.20.10/32", "10.96.0.10/32"]}}))
    (_, nodelocal) = _policy(docs, "grpo-dns")["egress"]
    assert nodelocal["to"] == [{"ipBlock": {"cidr": "169.254.20.10/32"}}, {"ipBlock": {"cidr": "10.96.0.10/32"}}]
    assert {p["port"] for p in nodelocal["ports"]} == {53, 5353}


def test_the_named_tunnel_route_is_the_capture_service_and_the_path_is_open():
    values = merged({"config": {"TUNNEL_HOSTNAME": "capture.example.com"}})
    out = render_text(values)
    docs = render(values)
    route = "http://grpo-capture.ml.svc.cluster.local:8100"
    notes = next(text for path, text in out.items() if path.endswith("NOTES.txt"))
    assert f"capture.example.com -> {route}" in notes
    # The Service that URL names exists, on that port, and selects the pod whose container serves it.
    (svc,) = [d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == "grpo-capture"]
    assert svc["metadata"]["namespace"] == "ml"
    assert svc["spec"]["ports"] == [{"name": "capture", "port": 8100, "targetPort": "capture"}]
    (env,) = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "grpo-env-server"]
    assert env["spec"]["template"]["metadata"]["labels"].items() >= svc["spec"]["selector"].items()
    ports = {p["name"]: p["containerPort"] for p in env["spec"]["template"]["spec"]["containers"][0]["ports"]}
    assert ports["capture"] == 8100
    # cloudflared may leave for that pod's port, and that pod admits cloudflared on it.
    egress = _policy(docs, "grpo-cloudflared")["egress"][0]
    assert egress["to"][0]["podSelector"]["matchLabels"] == svc["spec"]["selector"]
    assert egress["ports"] == [{"protocol": "TCP", "port": 8100}]
    ingress = _policy(docs, "grpo-env-server")["ingress"][0]
    assert ingress["from"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "cloudflared"
    # A token tunnel takes its ingress from Cloudflare: no --url that would look like a route and is ignored.
    (cf,) = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "grpo-cloudflared"]
    args = cf["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[-1] == "run" and "--url" not in args


def test_the_quick_tunnel_points_at_the_capture_service():
    (cf,) = [d for d in render() if d["kind"] == "Deployment" and d["metadata"]["name"] == "grpo-cloudflared"]
    args = cf["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--url") + 1] == "http://grpo-capture.ml.svc.cluster.local:8100"


def test_metrics_scraping_opens_cloudflared_metrics_to_the_named_peer_only():
    scraper = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
    }
    docs = render(merged({"networkPolicy": {"metricsScrapers": [scraper]}}))
    ingress = _policy(docs, "grpo-cloudflared")["ingress"]
    assert ingress[1] == {"from": [scraper], "ports": [{"protocol": "TCP", "port": 20241}]}
    for name in ("grpo-engine", "grpo-env-server", "grpo-trainer"):
        assert "monitoring" not in str(_policy(docs, name)), name
    assert len(_policy(render(), "grpo-cloudflared")["ingress"]) == 1


@pytest.mark.parametrize(
    "scraper",
    [{}, {"ipBlock": {"cidr": "0.0.0.0/0"}}, {"podSelector": {"matchExpressions": []}}],
)
def test_a_scraper_is_a_labelled_peer_not_an_address_range(scraper):
    import helm_python as helm

    with pytest.raises(helm.HelmValuesError, match="/networkPolicy/metricsScrapers/0"):
        render(merged({"networkPolicy": {"metricsScrapers": [scraper]}}))
