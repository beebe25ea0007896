"""The lines that carry a service's settings into its container, written from its settings tables: compose's
environment block, and for the trainer the chart's env list, its values.yaml default and its schema entry.

A setting added to a table reaches the container with no hand edit: scripts/settings_files.py appends what is
missing and `--check` fails while anything is. Lines already there are never rewritten, so a hand-written
default (`${WANDB_PROJECT:-asyncgrpo-harbor}`) or a comment above a line stays.

Not generated, on purpose:
- secrets (`Field(secret=True)`): which container sees a key is decided by hand, line by line;
- a setting a route says it does not pass (`Route.not_passed`), each with its reason;
- the other services' chart templates: they set most values themselves (pod addresses, the bucket path).
"""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from stack.env import Field


@dataclass(frozen=True)
class Route:
    service: str  # the compose service whose container reads the tables
    tables: tuple[tuple[str, str], ...]  # (module, attribute), as in settings_files.TABLES
    block: tuple[str, ...]  # the keys down to the compose mapping new lines go in
    chart_list: str = ""  # the chart helper whose configEnv list gets new names
    chart_pod_env: str = ""  # the chart helper that is the whole container's env (chart_list is part of it)
    not_passed: Mapping[str, str] = field(default_factory=dict)  # name -> why compose does not pass it


TRAINER_TABLES = (
    ("stack.readers.trainer", "FIELDS"),
    ("stack.readers.stop_rules", "FIELDS"),
    ("stack.readers.reporting", "FIELDS"),
    ("stack.readers.trainer_health", "FIELDS"),
)
ROUTES = (
    Route(
        "trainer",
        TRAINER_TABLES,
        ("x-train-env",),
        chart_list="agh.trainEnv",
        chart_pod_env="agh.trainerEnv",
        not_passed={"TRAINER_STATUS_POINTER": "a file inside the container, shared by the run and its healthcheck"},
    ),
    Route("env-server", (("stack.readers.env_server", "FIELDS"),), ("services", "env-server", "environment")),
    Route(
        "tunnel-check",
        (("stack.readers.tunnel_check", "FIELDS"),),
        ("services", "tunnel-check", "environment"),
        not_passed={"TUNNEL_METRICS_HOST": "compose runs every service on the host's network: its default, loopback"},
    ),
    Route("engine", (("engine.command", "FIELDS"),), ("services", "engine", "environment")),
)


def route_fields(route: Route) -> dict[str, Field]:
    found: dict[str, Field] = {}
    for module, name in route.tables:
        for f in getattr(importlib.import_module(module), name):
            found.setdefault(f.name, f)
    return found


def wanted(route: Route, fields: Mapping[str, Field]) -> list[Field]:
    """The route's settings that compose should pass: every one, less secrets and what the route says it does not
    (`fields`, all tables by name, is what the generator read, so a test's changed field is the one used)."""
    return [fields.get(n, f) for n, f in route_fields(route).items() if not f.secret and n not in route.not_passed]


# ── compose ──────────────────────────────────────────────────────────────────────────────────────────────────


def _find_block(lines: list[str], keys: Iterable[str]) -> tuple[int, int, str]:
    """(first line, end line, indent of its entries) of the mapping at `keys`: the block's own line, then every
    line indented deeper (or blank) after it."""
    start, end, indent = 0, len(lines), ""
    for key in keys:
        pattern = re.compile(rf"^{re.escape(indent)}{re.escape(key)}:(\s|$)")
        for i in range(start, end):
            if pattern.match(lines[i]):
                break
        else:
            raise SystemExit(f"scripts/settings_passthrough.py: no `{key}:` at indent {len(indent)} in compose.yaml")
        start = i + 1
        end = start
        while end < len(lines) and (not lines[end].strip() or _indent(lines[end]) > len(indent)):
            end += 1
        children = [ln for ln in lines[start:end] if ln.strip() and not ln.lstrip().startswith("#")]
        indent = " " * (_indent(children[0]) if children else len(indent) + 2)
    while end > start and not lines[end - 1].strip():
        end -= 1
    return start, end, indent


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def compose(text: str, fields: Mapping[str, Field], routes: Iterable[Route] = ROUTES) -> str:
    """compose.yaml with a `NAME: ${NAME:-}` line appended to each route's block for every setting its service's
    container does not get yet (directly, or through a merged anchor)."""
    import yaml  # the host venv's; only the generator and its tests run this

    for route in routes:
        env = _service_env(yaml.safe_load(text), route.service)
        missing = [f.name for f in wanted(route, fields) if f.name not in env]
        if not missing:
            continue
        lines = text.split("\n")
        _, end, indent = _find_block(lines, route.block)
        lines[end:end] = [f"{indent}{n}: ${{{n}:-}}" for n in missing]
        text = "\n".join(lines)
    return text


def _service_env(doc: dict, service: str) -> dict:
    env = doc["services"][service].get("environment") or {}
    if isinstance(env, list):  # the list form, NAME=value
        env = dict(item.split("=", 1) if "=" in item else (item, None) for item in env)
    return env


# ── the chart (trainer only) ─────────────────────────────────────────────────────────────────────────────────


def chart_names(helpers: str, define: str) -> set[str]:
    """Every variable the chart helper `define` sets, through the helpers it includes."""
    body = _define(helpers, define)
    names = set(re.findall(r'"([A-Z][A-Z0-9_]*)"', body)) | set(re.findall(r"name: ([A-Z][A-Z0-9_]*)", body))
    for inner in re.findall(r'include "(agh\.[A-Za-z]+)"', body):
        if inner != define:
            names |= chart_names(helpers, inner)
    return names


def _define(helpers: str, define: str) -> str:
    m = re.search(rf'{{{{- define "{re.escape(define)}" -}}}}(.*?){{{{- end -}}}}', helpers, re.S)
    if not m:
        raise SystemExit(f"scripts/settings_passthrough.py: the chart has no define {define}")
    return m.group(1)


def chart_missing(helpers: str, route: Route, fields: Mapping[str, Field]) -> list[Field]:
    have = chart_names(helpers, route.chart_pod_env)
    return [f for f in wanted(route, fields) if f.name not in have]


def helpers_tpl(helpers: str, route: Route, missing: list[Field]) -> str:
    """The route's configEnv list with the missing names appended."""
    if not missing:
        return helpers
    body = _define(helpers, route.chart_list)
    m = re.search(r'\(list ((?:"[A-Z0-9_]+" ?)+)\)', body)
    if not m:
        raise SystemExit(f"scripts/settings_passthrough.py: {route.chart_list} has no configEnv (list ...)")
    listed = m.group(1).rstrip()
    grown = listed + "".join(f' "{f.name}"' for f in missing)
    return helpers.replace(body, body.replace(listed, grown, 1), 1)


def values_yaml(text: str, missing: list[Field], default_text) -> str:
    """values.yaml with `NAME: <default>` appended to `config:` for each missing setting not there yet."""
    lines = text.split("\n")
    _, end, indent = _find_block(lines, ("config",))
    have = {ln.strip().split(":", 1)[0] for ln in lines[:end] if ln.startswith(indent) and ":" in ln}
    add = [f"{indent}{f.name}: {_yaml_value(f, default_text(f))}" for f in missing if f.name not in have]
    lines[end:end] = add
    return "\n".join(lines)


def _yaml_value(f: Field, text: str) -> str:
    """The default as values.yaml must hold it to pass the schema entry schema_doc writes: a number for a number
    (1e-06 is a string to YAML 1.1, so a fraction is written out in decimals), a string otherwise."""
    if f.kind in ("integer", "port", "flag", "number") and text:
        value = float(text)
        return str(int(value)) if value.is_integer() else f"{value:.12f}".rstrip("0")
    return json.dumps(text)  # a JSON string is a YAML string: "", "on" and "1.0.0" stay strings


# A new setting's JSON type, by the table's kind; what the chart takes beyond that (a string form of a number,
# a pattern) stays a hand edit, as for the settings already there.
SCHEMA_TYPES = {"integer": "integer", "port": "integer", "number": "number", "flag": "integer"}


def schema_doc(doc: dict, missing: list[Field]) -> dict:
    config = doc["properties"]["config"]
    for f in missing:
        if f.name in config["properties"]:
            continue
        entry: dict = {"type": SCHEMA_TYPES.get(f.kind, "string")}
        if f.kind == "flag":
            entry["enum"] = [0, 1]
        config["properties"][f.name] = entry
        config["required"] = sorted({*config["required"], f.name})
    return doc
