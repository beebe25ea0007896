"""One owner per default: each setting's default is its Python field (stack.env.Field), and the other places
that state a value are tested against that field, so none of them can drift.

- compose passes a setting through (`X: ${X:-}`), so an unset variable reaches the service empty and the
  field's default applies. Where compose itself needs the value (to build cloudflared's command line, the
  engine's URL) or a library reads the variable, its `${X:-v}` must equal the field's default.
- `.env.example` shows every field's default.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from settings_tables import FIELDS, states_default

ROOT = Path(__file__).resolve().parents[2]
# Names compose gives a value of its own, each for a reason, each tested equal to the field's default.
COMPOSE_KEEPS = {
    # huggingface_hub reads it, and takes an empty value as the Hub's address.
    "HF_ENDPOINT",
    # wandb reads it; an empty project is not "the default project".
    "WANDB_PROJECT",
    # tunnel-check reads it as optional (unset: no metrics discovery); compose passes the port it gives
    # cloudflared's --metrics.
    "TUNNEL_METRICS_PORT",
}
# .env.example values that are not a field's default, each for a reason.
ENV_EXAMPLE_NOT_DEFAULT = {
    # Docker Compose's own variable: the default TUNNEL_PROVIDER (cloudflared) needs its profile on.
    "COMPOSE_PROFILES",
}


def test_every_field_is_documented_and_typed():
    for field in FIELDS.values():
        assert field.doc, f"{field.name} has no one-line doc"
        if field.kind == "choice":
            assert field.default is None or field.default in field.choices, field.name


@pytest.mark.parametrize("path", ["compose.yaml", "compose.cpu.yaml"])
def test_compose_passes_settings_through(path):
    text = (ROOT / path).read_text()
    for name, default in re.findall(r"^\s*([A-Z][A-Z0-9_]*): \$\{\1:-([^}]*)\}\s*$", text, re.M):
        if name in FIELDS and default:
            assert name in COMPOSE_KEEPS, (
                f"{path}: {name}: ${{{name}:-{default}}} restates the default: use ${{{name}:-}}"
            )


@pytest.mark.parametrize("path", ["compose.yaml", "compose.cpu.yaml"])
def test_every_value_compose_still_states_is_the_fields_default(path):
    for name, default in re.findall(r"\$\{([A-Z][A-Z0-9_]*):-([^}]+)\}", (ROOT / path).read_text()):
        if name in FIELDS:
            assert states_default(FIELDS[name], default), f"{path}: ${{{name}:-{default}}} != {FIELDS[name].default!r}"


def test_env_example_shows_each_fields_default():
    shown = dict(re.findall(r"^([A-Z][A-Z0-9_]*)=(.*)$", (ROOT / ".env.example").read_text(), re.M))
    for name, value in shown.items():
        if name in FIELDS and name not in ENV_EXAMPLE_NOT_DEFAULT:
            assert states_default(FIELDS[name], value), f".env.example: {name}={value} != {FIELDS[name].default!r}"
    # A compose-only knob (image tags, GPU ids, stop grace periods) is stated in compose and here: the same.
    compose = "".join((ROOT / f).read_text() for f in ("compose.yaml", "compose.cpu.yaml"))
    for name, default in re.findall(r"\$\{([A-Z][A-Z0-9_]*):-([^}]*)\}", compose):
        if name not in FIELDS and name in shown:
            assert shown[name] == default, f".env.example: {name}={shown[name]} but compose says {default}"


def test_a_drifted_default_is_caught():
    """The comparison itself: a value that is not the default is told apart from one that is."""
    assert states_default(FIELDS["MAX_STEPS"], "200") and not states_default(FIELDS["MAX_STEPS"], "201")
    assert states_default(FIELDS["TRAINER_COMPILE_LAYERS"], "1") and not states_default(
        FIELDS["TRAINER_COMPILE_LAYERS"], "0"
    )
    assert states_default(FIELDS["LEARNING_RATE"], "1e-6") and states_default(
        FIELDS["DATASETS"], "/app/datasets/starter"
    )
    assert states_default(FIELDS["TRAIN_DTYPE"], "float32") and not states_default(FIELDS["TRAIN_DTYPE"], "bfloat16")


def test_the_charts_bounds_are_the_fields():
    """The Helm chart's schema bounds a setting exactly as its field does (CAPTURE_MAX_BODY_MB <= 64,
    CAPTURE_MAX_CONCURRENT <= 1024, ...): neither lets through what the other refuses."""
    import json

    schema = json.loads((ROOT / "deploy/helm/asyncgrpo-harbor/values.schema.json").read_text())
    config = schema["properties"]["config"]["properties"]
    bounded = {name: spec for name, spec in config.items() if "maximum" in spec and name in FIELDS}
    assert {"CAPTURE_MAX_BODY_MB", "CAPTURE_MAX_CONCURRENT"} <= set(bounded)
    # Both ways: a field's maximum is the schema's wherever the chart takes the setting.
    assert {n for n in config if n in FIELDS and FIELDS[n].maximum is not None} <= set(bounded)
    for name, spec in bounded.items():
        field = FIELDS[name]
        if field.kind == "port":
            assert (spec["minimum"], spec["maximum"]) == (1, 65535), name
            continue
        assert spec["maximum"] == field.maximum, name
        # A value the chart also takes as a string (1e-6) has no numeric minimum there; where one is stated, it is
        # the field's, or stricter than a field's strict lower bound (an integer schema's 1 for "above 0").
        if "minimum" in spec:
            assert spec["minimum"] == field.minimum if field.above is None else spec["minimum"] > field.above, name
