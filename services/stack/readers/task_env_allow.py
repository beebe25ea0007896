"""TASK_ENV_ALLOW read as env-server reads it: the host variables a task's `${VAR}` may see, refused in one line
when an entry is not a name or names a secret. Here, not in env_server/task_env.py (which applies the list), so
preflight checks it without importing env-server."""

from __future__ import annotations

import re

from stack.env import EnvError

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# The stack's own secrets by name, and the words a credential's name carries. A task's code comes from a
# dataset and, while it runs, from the model being trained: whatever it can read, a rollout can print.
SECRET_NAMES = frozenset(
    {
        "E2B_API_KEY",
        "HF_TOKEN",
        "HUB_TOKEN",
        "HUGGING_FACE_HUB_TOKEN",
        "WANDB_API_KEY",
        "TUNNEL_TOKEN",
        "CLOUDFLARED_TOKEN",
        "TUNNEL_ORIGIN_CERT",
        "OPENENV_CAPTURE_ADMIN_KEY",
        "OPENENV_LLM_API_KEY",
    }
)
SECRET_WORDS = frozenset({"TOKEN", "SECRET", "PASSWORD", "PASSWD", "APIKEY", "CREDENTIAL", "CREDENTIALS"})


def is_secret(name: str) -> bool:
    words = name.upper().split("_")
    return name.upper() in SECRET_NAMES or words[-1] == "KEY" or bool(SECRET_WORDS.intersection(words))


def allow_list(raw: str) -> tuple[str, ...]:
    """TASK_ENV_ALLOW's names, or EnvError (one line: the variable, its value, the fix) for a line break, a
    wildcard or other non-name (taken literally it granted nothing and said nothing), or a secret's name. The
    line names every such entry: one per start would have the operator fix them one restart at a time."""
    if "\n" in raw or "\r" in raw:
        return _refuse(raw, "has a line break: list the names on one line, comma-separated (TASK_ENV_ALLOW=A,B)")
    names = tuple(v.strip() for v in raw.split(",") if v.strip())
    not_names = _unique(n for n in names if not _NAME.fullmatch(n))
    secrets = _unique(n for n in names if _NAME.fullmatch(n) and is_secret(n))
    why = []
    if not_names:
        why.append(
            f"{_entries(not_names)} {'is not a variable name' if len(not_names) == 1 else 'are not variable names'} "
            "(wildcards and patterns are not expanded): list each variable a task may read by its exact name, "
            "comma-separated, e.g. TASK_ENV_ALLOW=TEST_DIR,MY_VAR"
        )
    if secrets:
        one = len(secrets) == 1
        why.append(
            f"{_entries(secrets)} {'names a secret' if one else 'name secrets'}, and tasks run code from the dataset "
            f"and from the model being trained, which would read {'it' if one else 'them'}: remove "
            f"{_and(secrets)} from TASK_ENV_ALLOW (a task that needs a credential of its own gets it as a literal "
            "in its task.toml env table)"
        )
    if why:
        return _refuse(raw, "; ".join(why))
    return names


def _unique(names) -> list[str]:
    return list(dict.fromkeys(names))


def _entries(names: list[str]) -> str:
    return ("entry " if len(names) == 1 else "entries ") + ", ".join(map(repr, names))


def _and(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _refuse(raw: str, why: str) -> tuple[str, ...]:
    raise EnvError(f"TASK_ENV_ALLOW={raw!r} {why}")
