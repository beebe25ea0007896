"""Render the Helm chart offline with Helm's own Go SDK (helm-python-sdk: Helm 4 as a shared library in
a PyPI wheel; no binary, no cluster, nothing downloaded at test time)."""

from __future__ import annotations

import functools
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "deploy/helm/asyncgrpo-harbor"
RELEASE, NAMESPACE = "grpo", "ml"
# The least a user must set (the chart refuses to guess where checkpoints go).
REQUIRED = {"bucket": {"storageClassName": "nfs-rwx"}}
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def merged(*overrides: dict) -> dict:
    out: dict = {}
    for over in (REQUIRED, *overrides):
        for key, value in over.items():
            out[key] = {**out.get(key, {}), **value} if isinstance(value, dict) else value
    return out


@functools.cache
def _chart():
    """The chart, loaded once: a render of a loaded chart takes ~25 ms, a load ~150 ms, and the hostile-values
    suite renders a few hundred times."""
    import helm_python as helm

    return helm.Chart.load(str(CHART)).__enter__()


def render_text(values: dict | None = None, *, name: str = RELEASE, namespace: str = NAMESPACE) -> dict[str, str]:
    """`helm template`'s output per template path, NOTES.txt included."""
    return _chart().render(values if values is not None else merged(), name=name, namespace=namespace)


def render(values: dict | None = None, *, name: str = RELEASE, namespace: str = NAMESPACE) -> list[dict]:
    """Every rendered manifest, as `helm template` would print them (NOTES.txt left out)."""
    docs = []
    for path, text in sorted(render_text(values, name=name, namespace=namespace).items()):
        if path.endswith("NOTES.txt"):
            continue
        docs += [doc for doc in yaml.load_all(text, Loader=_LOADER) if doc]
    return docs
