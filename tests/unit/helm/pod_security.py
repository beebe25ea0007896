"""Pod Security Standards, "restricted" profile, as a function of a pod spec: the checks the admission
controller makes (https://kubernetes.io/docs/concepts/security/pod-security-standards/, the "baseline"
controls plus the "restricted" ones, as of Kubernetes 1.33). No cluster runs here, so the profile is
checked on the rendered manifests; a cluster would apply the same rules to the same fields."""

from __future__ import annotations

RESTRICTED_VOLUMES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}


def pod_specs(docs):
    """(workload name, pod spec) of every workload in a render."""
    for doc in docs:
        if doc["kind"] in ("Deployment", "Job", "StatefulSet", "DaemonSet"):
            yield doc["metadata"]["name"], doc["spec"]["template"]["spec"]
        elif doc["kind"] == "Pod":
            yield doc["metadata"]["name"], doc["spec"]


def restricted_violations(pod: dict) -> list[str]:
    """Every way this pod spec fails the restricted profile; empty when it would be admitted."""
    out = []
    psc = pod.get("securityContext") or {}
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(field):
            out.append(field)
    for volume in pod.get("volumes", []):
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            out.append(f"volume {volume['name']}: {sorted(kinds)}")
    for sysctl in psc.get("sysctls", []):
        if sysctl["name"] not in SAFE_SYSCTLS:
            out.append(f"sysctl {sysctl['name']}")
    if (psc.get("seLinuxOptions") or {}).get("user") or (psc.get("seLinuxOptions") or {}).get("role"):
        out.append("pod seLinuxOptions user/role")
    if (psc.get("appArmorProfile") or {}).get("type") == "Unconfined":
        out.append("pod appArmorProfile Unconfined")
    if psc.get("runAsUser") == 0:
        out.append("pod runAsUser 0")
    for container in pod.get("initContainers", []) + pod["containers"]:
        name = container["name"]
        csc = container.get("securityContext") or {}
        if csc.get("privileged"):
            out.append(f"{name}: privileged")
        caps = csc.get("capabilities") or {}
        if set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            out.append(f"{name}: capabilities.add {caps['add']}")
        if "ALL" not in (caps.get("drop") or []):
            out.append(f"{name}: capabilities.drop lacks ALL")
        if csc.get("allowPrivilegeEscalation") is not False:
            out.append(f"{name}: allowPrivilegeEscalation not false")
        if not csc.get("runAsNonRoot", psc.get("runAsNonRoot")):
            out.append(f"{name}: runAsNonRoot not true")
        if csc.get("runAsUser") == 0:
            out.append(f"{name}: runAsUser 0")
        seccomp = (csc.get("seccompProfile") or psc.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            out.append(f"{name}: seccompProfile {seccomp}")
        if csc.get("procMount", "Default") != "Default":
            out.append(f"{name}: procMount")
        if (csc.get("appArmorProfile") or {}).get("type") == "Unconfined":
            out.append(f"{name}: appArmorProfile Unconfined")
        for port in container.get("ports", []):
            if port.get("hostPort"):
                out.append(f"{name}: hostPort")
    return out
