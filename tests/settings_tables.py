"""The settings tables of every service, gathered for the host unit tests (compose, .env.example and the
Helm chart are checked against them). Host only: no one image carries every service.
"""

from __future__ import annotations

import importlib

from stack.env import TRUE_WORDS, Field

# Every module that declares the settings its service reads.
TABLES = [
    ("stack.fields", "SHARED"),
    ("trainer.config", "FIELDS"),
    ("trainer.stop_rules", "FIELDS"),
    ("trainer.reporting", "FIELDS"),
    ("trainer.dashboard", "FIELDS"),
    ("trainer.healthcheck", "FIELDS"),
    ("env_server.settings", "FIELDS"),
    ("tunnel_check.settings", "FIELDS"),
    ("engine.command", "FIELDS"),
    ("guards.checks", "FIELDS"),
    ("mock_engine.__main__", "FIELDS"),
    ("tunnel_standin.__main__", "FIELDS"),
]


def all_fields() -> dict[str, Field]:
    found: dict[str, Field] = {}
    for module, name in TABLES:
        for field in getattr(importlib.import_module(module), name):
            assert found.setdefault(field.name, field) is field, f"{field.name} is declared twice ({module})"
    return found


FIELDS = all_fields()


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
    default = FIELDS[name].default
    if default is None:
        return ""
    if isinstance(default, bool):
        return "1" if default else "0"
    if isinstance(default, tuple):
        return ",".join(default)
    if isinstance(default, float) and default.is_integer():
        return str(int(default))
    return str(default)
