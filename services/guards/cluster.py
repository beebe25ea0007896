"""The guards' cluster mode (DEPLOYMENT=kubernetes, set by the Helm chart): which checks change meaning
in a pod, and the refusals only a cluster has. Kept apart from checks.py so the compose path reads as
it always did.

- ports: each pod has its own network namespace, so "is port N free on this host" asks nothing; the
  values are still checked (a TCP port, no two alike) because the chart's Services use them.
- tunnel: compose starts cloudflared through a profile that must agree with TUNNEL_PROVIDER; the chart
  derives the cloudflared Deployment from TUNNEL_PROVIDER itself, so there is nothing to disagree.
- sandbox: the host's Docker socket is refused by design. Mounting a node's daemon into a pod hands
  every sandbox (model-written code) the node, and Harbor's docker environment bind-mounts host paths
  the pod cannot share; sandboxes on a cluster are E2B.
- bucket: the mount is a PersistentVolumeClaim, so the fix an operator reads names the chart's values.
"""

from __future__ import annotations

from collections.abc import Mapping

from stack import deployment
from stack.env import EnvError

DOCKER_SANDBOX_REFUSED = (
    "SANDBOX=docker is refused on Kubernetes (DEPLOYMENT=kubernetes): a pod given the node's Docker socket "
    "gives every sandbox the node; use SANDBOX=e2b with E2B_API_KEY in the chart's Secret"
)
BUCKET_FIX_COMPOSE = "Mount the bucket on the host at BUCKET_PATH (e.g. gcsfuse/NFS/a disk) before `docker compose up`"
BUCKET_FIX_KUBERNETES = (
    "Mount a PersistentVolumeClaim at the bucket (chart values bucket.existingClaim, or "
    "bucket.storageClassName of a ReadWriteMany or CSI object-store class)"
)


def on_kubernetes(env: Mapping[str, str]) -> bool:
    """A bad DEPLOYMENT reads as compose here (the stricter mode); check_deployment reports it."""
    try:
        return deployment.read(env) == deployment.KUBERNETES
    except EnvError:
        return False


def check_deployment(env, probes):
    try:
        deployment.read(env)
    except EnvError as exc:
        return str(exc)
    return None


def bucket_fix(env: Mapping[str, str]) -> str:
    return BUCKET_FIX_KUBERNETES if on_kubernetes(env) else BUCKET_FIX_COMPOSE
