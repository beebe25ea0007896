"""The settings parts of .env.example and the chart's values.schema.json are written from the settings tables
(scripts/settings_files.py): the committed files are current, and a changed table makes --check fail."""

from __future__ import annotations

import dataclasses
import json

from settings_tables import settings_files


def test_the_committed_files_are_current(capsys):
    assert settings_files.main(["--check"]) == 0, capsys.readouterr().err


def test_a_changed_table_makes_check_fail_naming_the_file_and_the_command(monkeypatch, capsys):
    fields = settings_files.all_fields()
    changed = dict(fields, MAX_STEPS=dataclasses.replace(fields["MAX_STEPS"], default=201, maximum=999))
    monkeypatch.setattr(settings_files, "all_fields", lambda: changed)
    assert settings_files.main(["--check"]) == 1
    err = capsys.readouterr().err
    assert ".env.example differs" in err and "values.schema.json differs" in err
    assert "scripts/settings_files.py" in err


def test_a_new_setting_lands_in_the_generated_tail():
    fields = settings_files.all_fields()
    new = settings_files.Field("SETTINGS_FILES_TEST_KNOB", "integer", 3, "a knob only this test declares", minimum=1)
    text = settings_files.env_example(settings_files.ENV_EXAMPLE.read_text(), {**fields, new.name: new})
    tail = text.split(settings_files.TAIL_MARK, 1)[1]
    assert "#> A knob only this test declares (an integer, >= 1).\n# SETTINGS_FILES_TEST_KNOB=3\n" in tail


def test_a_doc_change_reaches_both_files():
    fields = settings_files.all_fields()
    changed = dict(fields, MAX_STEPS=dataclasses.replace(fields["MAX_STEPS"], doc="steps, said anew"))
    env = settings_files.env_example(settings_files.ENV_EXAMPLE.read_text(), changed)
    schema = settings_files.schema(settings_files.SCHEMA.read_text(), changed)
    assert "#> Steps, said anew (an integer, >= 1, <= 1000000).\nMAX_STEPS=200\n" in env
    assert '"description": "Steps, said anew."' in schema


def test_a_new_backend_reaches_env_example_but_not_the_chart():
    """The chart runs the backends its templates were written for; a new registry entry is not one of them."""
    fields = settings_files.all_fields()
    sandbox = dataclasses.replace(fields["SANDBOX"], choices=(*fields["SANDBOX"].choices, "throwaway"))
    changed = dict(fields, SANDBOX=sandbox)
    schema = json.loads(settings_files.schema(settings_files.SCHEMA.read_text(), changed))
    assert schema["properties"]["config"]["properties"]["SANDBOX"]["enum"] == ["e2b"]
    env = settings_files.env_example(settings_files.ENV_EXAMPLE.read_text(), changed)
    assert "one of: e2b, docker, throwaway" in env


# ── a new setting reaches its container: compose, and for the trainer the chart (scripts/settings_passthrough.py)


def _add_field(monkeypatch, module: str, new):
    import importlib

    from stack.env import Table

    mod = importlib.import_module(module)
    monkeypatch.setattr(mod, "FIELDS", Table(mod.FIELDS, new))


def test_a_new_trainer_setting_reaches_compose_the_chart_values_and_schema(monkeypatch, capsys):
    import yaml

    new = settings_files.Field("STOP_TEST_KNOB", "integer", 3, "a knob only this test declares", minimum=1)
    _add_field(monkeypatch, "stack.readers.stop_rules", new)
    files = settings_files.generated()

    # Appended as the last line of x-train-env, the committed block above it unchanged.
    committed = settings_files.COMPOSE.read_text()
    block = committed.split("x-train-env: &train-env\n", 1)[1].split("\n\n", 1)[0]
    compose = files[settings_files.COMPOSE]
    assert f"x-train-env: &train-env\n{block}\n  STOP_TEST_KNOB: ${{STOP_TEST_KNOB:-}}\n\n" in compose
    doc = yaml.safe_load(compose)
    assert doc["services"]["trainer"]["environment"]["STOP_TEST_KNOB"] == "${STOP_TEST_KNOB:-}"
    assert "STOP_TEST_KNOB" not in doc["services"]["env-server"]["environment"]

    listed = _chart_list(settings_files.HELPERS.read_text())
    assert _chart_list(files[settings_files.HELPERS]) == [*listed, "STOP_TEST_KNOB"]
    values = yaml.safe_load(files[settings_files.VALUES])
    assert values["config"]["STOP_TEST_KNOB"] == 3
    schema = json.loads(files[settings_files.SCHEMA])["properties"]["config"]
    assert schema["properties"]["STOP_TEST_KNOB"] == {
        "type": "integer",
        "description": "A knob only this test declares.",
        "minimum": 1,
    }
    assert "STOP_TEST_KNOB" in schema["required"]
    # .env.example's tail lists it uncommented: compose now reads it.
    assert "\nSTOP_TEST_KNOB=3\n" in files[settings_files.ENV_EXAMPLE]

    assert settings_files.main(["--check"]) == 1
    err = capsys.readouterr().err
    for name in ("compose.yaml", "_helpers.tpl", "values.yaml", "values.schema.json", ".env.example"):
        assert f"{name} differs" in err


def _chart_list(helpers: str) -> list[str]:
    import re

    body = helpers.split('{{- define "agh.trainEnv" -}}', 1)[1].split("{{- end -}}", 1)[0]
    return re.findall(r'"([A-Z0-9_]+)"', re.search(r"\(list ([^)]*)\)", body).group(1))


def test_a_new_fractional_setting_is_a_number_in_values_yaml(monkeypatch):
    """1e-06 would be a string to YAML 1.1 and fail the chart's schema (type number): written out in decimals."""
    import yaml

    new = settings_files.Field("STOP_TEST_RATE", "number", 1e-6, "a rate only this test declares", minimum=0)
    _add_field(monkeypatch, "stack.readers.stop_rules", new)
    files = settings_files.generated()
    assert "\n  STOP_TEST_RATE: 0.000001\n" in files[settings_files.VALUES] + "\n"
    assert yaml.safe_load(files[settings_files.VALUES])["config"]["STOP_TEST_RATE"] == 1e-6
    schema = json.loads(files[settings_files.SCHEMA])["properties"]["config"]["properties"]
    assert schema["STOP_TEST_RATE"]["type"] == "number"


def test_a_new_env_server_setting_reaches_its_compose_block_only(monkeypatch):
    import yaml

    new = settings_files.Field("ENV_SERVER_TEST_KNOB", "text", "", "a knob only this test declares")
    _add_field(monkeypatch, "stack.readers.env_server", new)
    files = settings_files.generated()
    doc = yaml.safe_load(files[settings_files.COMPOSE])
    assert doc["services"]["env-server"]["environment"]["ENV_SERVER_TEST_KNOB"] == "${ENV_SERVER_TEST_KNOB:-}"
    assert "ENV_SERVER_TEST_KNOB" not in doc["services"]["trainer"]["environment"]
    # The chart's other pods set their values in their templates: not generated.
    assert files[settings_files.HELPERS] == settings_files.HELPERS.read_text()


def test_a_new_secret_reaches_no_container_by_itself(monkeypatch):
    new = settings_files.Field("TEST_API_KEY", "text", "", "a key only this test declares", secret=True)
    _add_field(monkeypatch, "stack.readers.trainer", new)
    files = settings_files.generated()
    assert "TEST_API_KEY" not in files[settings_files.COMPOSE]
    assert "TEST_API_KEY" not in files[settings_files.HELPERS]
    assert "TEST_API_KEY" not in files[settings_files.VALUES]
