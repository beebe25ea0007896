"""DEPLOYMENT: where the stack runs, chosen explicitly because a few contracts depend on it.

- `compose` (the default): every service is on the host network, so "only the capture proxy is public"
  is kept by binding 127.0.0.1; the Docker socket may back local sandboxes; preflight can see which
  ports the host already uses.
- `kubernetes` (set by the Helm chart, deploy/helm/): each pod has its own network namespace, so the
  services bind the pod's interfaces and NetworkPolicies keep them in (loopback would make them
  unreachable to each other); the host's Docker socket is refused (sandboxes are E2B); "is this port
  free on the host" means nothing.

Never guessed from the environment (KUBERNETES_SERVICE_HOST is also set inside a compose container
started by a kubelet-managed Docker): a wrong guess would either refuse a working stack or open a port.
"""

from __future__ import annotations

from collections.abc import Mapping

from .env import Env
from .fields import DEPLOYMENT

COMPOSE, KUBERNETES = DEPLOYMENT.choices
DEPLOYMENTS = DEPLOYMENT.choices


def read(env: Mapping[str, str]) -> str:
    return Env(env).get(DEPLOYMENT)
