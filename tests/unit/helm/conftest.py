"""Fixtures for the chart's tests: renders (helm_render) and compose.yaml through `docker compose config`
(tests/compose_config.py), so the two can be compared."""

from __future__ import annotations

import pytest
from compose_config import compose_config
from unit.helm.helm_render import NAMESPACE, RELEASE, REQUIRED, ROOT, merged, render, render_text  # noqa: F401


@pytest.fixture(scope="session")
def manifests() -> list[dict]:
    return render()


@pytest.fixture(scope="session")
def render_chart():
    return render


@pytest.fixture(scope="session")
def values():
    return merged


@pytest.fixture(scope="session")
def compose():
    """compose.yaml resolved with `env` (the production file alone, as the chart mirrors it)."""
    return lambda env=None: compose_config("compose.yaml", env=env)
