"""The settings tables of every service, gathered for the host unit tests (compose, .env.example and the
Helm chart are checked against them). Host only: no one image carries every service.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from stack.env import TRUE_WORDS, Field

# scripts/settings_files.py: the list of settings tables the generator writes .env.example and the chart schema from.
_spec = importlib.util.spec_from_file_location(
    "settings_files", Path(__file__).resolve().parents[1] / "scripts/settings_files.py"
)
settings_files = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(settings_files)


# The same gathering and default rendering the generator uses, so the tests and the generated files agree by
# construction.
FIELDS = settings_files.all_fields()


def states_default(field: Field, text: str) -> bool:
    """Whether `text`, as an operator would write it, is the field's default."""
    default = field.default
    if default is None or default == "" or default == ():
        return text == ""
    if field.kind == "words":
        return tuple(w.strip() for w in text.split(",") if w.strip()) == default
    if field.kind == "flag":
        return (text.lower() in TRUE_WORDS) == default
    if field.kind in ("integer", "port"):
        return text.isdigit() and int(text) == default
    if field.kind == "number":
        return float(text) == default
    return text == str(default)


def effective(environment: dict, name: str) -> str:
    """What a service reads for `name` from a compose environment: its value, or (passed through empty)
    its field's default as an operator would write it."""
    value = environment.get(name) or ""
    if value or name not in FIELDS:
        return value
    return settings_files.default_text(FIELDS[name])
