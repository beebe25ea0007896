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
