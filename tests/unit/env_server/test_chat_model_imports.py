"""The model layer copied into every sandbox (env_server/asyncgrpo_chat_model.py) imports only what the agent's
Python already loads: the standard library, mini-swe-agent and pydantic (mini-swe-agent's agent imports it).
Anything else would be an install the sandbox lacks, or the import cost the module exists to avoid (litellm:
4.6 CPU-s and 154 MB, benchmarks/agent_import.py). Read from its source: the host venv has no mini-swe-agent;
the module runs in tests/integration/env_server_guards/test_chat_model_parity.py."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

MODULE = Path(__file__).resolve().parents[3] / "services" / "env_server" / "asyncgrpo_chat_model.py"
ALLOWED = {"minisweagent", "pydantic"}


def top_level_imports(tree: ast.Module) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_the_sandbox_model_imports_only_the_stdlib_minisweagent_and_pydantic():
    imported = top_level_imports(ast.parse(MODULE.read_text()))
    assert "minisweagent" in imported and "urllib" in imported
    assert sorted(imported - set(sys.stdlib_module_names) - ALLOWED - {"__future__"}) == []


def test_the_check_sees_a_third_party_import():
    tree = ast.parse(MODULE.read_text() + "\nimport litellm\nfrom requests import post\n")
    assert sorted(top_level_imports(tree) - set(sys.stdlib_module_names) - ALLOWED - {"__future__"}) == [
        "litellm",
        "requests",
    ]
