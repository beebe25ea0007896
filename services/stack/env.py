"""Environment readers: every service reads its settings through these, so every bad value is reported
the same way: ONE line that names the variable, the value it had, and what to set instead.

    env = Env()                              # raises EnvError at the first bad value (a service starting)
    env = Env(collect=True)                  # keeps going; env.problems lists every bad value (preflight)
    value = env.get(FIELDS["MAX_STEPS"])     # a declared field: its type, bounds, default and fix text

Each setting is declared once as a `Field` in its service's table (`Table`): that field is the only place
its default is written. compose passes names through (`X: ${X:-}`); `.env.example`'s value and `#>` lines
and the chart schema's descriptions, bounds and enums are written from the tables by scripts/settings_files.py
(tests/unit/test_settings_files.py checks they are current).

Unset and empty are the same thing (compose passes `${X:-}` as an empty string): both mean the default.
A reader that collects returns the default for a bad value, so the caller can keep reading.
"""

from __future__ import annotations

import os
import re
import unicodedata
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")

TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")


class EnvError(ValueError):
    """A setting a service cannot run with: the one exception type for a bad setting, in every service.
    `str(exc)` is the line (or lines, one per setting) the operator reads; `problems` lists them."""

    def __init__(self, message: str | list[str]):
        problems = [message] if isinstance(message, str) else list(message)
        super().__init__("\n".join(problems))
        self.problems = problems


_UNSET: Any = object()
# Names whose values are never printed: every field declared `secret=True` (added as it is declared), and
# any name that says it holds a credential, for the few variables read without a field.
SECRET_NAMES: set[str] = set()
# Every declared field's name: a field says itself whether it is secret (REWARD_KEY names a reward, not a key).
DECLARED_NAMES: set[str] = set()
_SECRET_WORDS = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD)$")


def shown(name: str, value: str) -> str:
    """`value` as a refusal line may print it: quoted, or only its length for a secret."""
    if name in SECRET_NAMES or (name not in DECLARED_NAMES and _SECRET_WORDS.search(name)):
        return f"<secret, {len(value)} characters>"
    return repr(value)


def _control_character(value: str) -> int | None:
    """The index of the first control character (Unicode category Cc: newline, CR, tab, NUL, ESC, ...)."""
    return next((i for i, c in enumerate(value) if unicodedata.category(c) == "Cc"), None)


def _n(bound: float) -> str:
    """A bound as a line prints it: 1000000, not :g's 1e+06; 0.01 as is."""
    return str(int(bound)) if float(bound).is_integer() and abs(bound) < 1e15 else f"{bound:g}"


KINDS = ("text", "integer", "number", "flag", "choice", "url", "path", "port", "words", "phrase")


@dataclass(frozen=True)
class Field:
    """One setting: its variable, type (`kind`), bounds, default, one-line doc and fix text.

    `default=None` on a field whose default is derived from other settings (the reader passes it);
    `phrase` is an opt-out that is either empty or exactly `choices[0]`; `words` is a comma-separated list.
    `fix_above` is the fix for a value above `maximum` where `fix` speaks of the lower end (the default: `fix`,
    else "set X to at most M").
    """

    name: str
    kind: str
    default: Any = ""
    doc: str = ""
    fix: str = ""
    minimum: float | None = None
    maximum: float | None = None
    above: float | None = None
    choices: tuple[str, ...] = ()
    aliases: Mapping[str, str] | None = None
    secret: bool = False
    fix_above: str = ""
    # A value that is there but says nothing (only blanks; for `words`, only commas) is refused rather than read
    # as the default: `MODEL="  "` or `DATASETS=,` is a slip, and the default model or the starter set would
    # start in its place without a word. Unset and empty stay the default (compose passes `${X:-}`).
    blank_refused: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"{self.name}: unknown kind {self.kind!r}")
        DECLARED_NAMES.add(self.name)
        if self.secret:
            SECRET_NAMES.add(self.name)

    def read(self, env: Env, default: Any = _UNSET) -> Any:
        d = self.default if default is _UNSET else default
        k, fix = self.kind, self.fix
        if self.blank_refused and (blank := self._blank(env)) is not None:
            return env.refuse(
                f"{self.name}={blank!r} says nothing: set {self.name} to a value, or leave it empty for the "
                f"default ({', '.join(d) if isinstance(d, tuple) else d})",
                d,
            )
        if k == "integer":
            return env.integer(
                self.name, d, minimum=self.minimum, maximum=self.maximum, fix=fix, fix_above=self.fix_above
            )
        if k == "number":
            return env.number(
                self.name,
                d,
                minimum=self.minimum,
                maximum=self.maximum,
                above=self.above,
                fix=fix,
                fix_above=self.fix_above,
            )
        if k == "flag":
            return env.flag(self.name, d)
        if k == "choice":
            return env.choice(self.name, d, self.choices, aliases=self.aliases, fix=fix)
        if k == "url":
            return env.url(self.name, d, fix=fix)
        if k == "path":
            return env.path(self.name, d)
        if k == "port":
            return env.port(self.name, d)
        if k == "words":
            raw = env.text(self.name)
            return tuple(w.strip() for w in raw.split(",") if w.strip()) if raw else d
        if k == "phrase":
            raw = env.text(self.name)
            if raw and raw != self.choices[0]:
                return env.refuse(f"{self.name}={raw!r} is not the opt-out phrase: {fix}", d)
            return raw or d
        return env.text(self.name, d)

    def _blank(self, env: Env) -> str | None:
        """The raw value when it is non-empty but blank (whitespace; for `words`, separators too), else None."""
        raw = env.env.get(self.name)
        if not raw:
            return None
        return raw if not raw.strip(" \t" + ("," if self.kind == "words" else "")) else None


class Table:
    """A service's fields by name. Tables may share fields (stack.fields): a field object is one owner."""

    def __init__(self, *fields: Field | Table) -> None:
        self.fields: dict[str, Field] = {}
        for item in fields:
            for f in item if isinstance(item, Table) else (item,):
                if f.name in self.fields and self.fields[f.name] is not f:
                    raise ValueError(f"{f.name} is declared twice")
                self.fields[f.name] = f

    def __getitem__(self, name: str) -> Field:
        return self.fields[name]

    def __iter__(self) -> Iterator[Field]:
        return iter(self.fields.values())

    def __contains__(self, name: object) -> bool:
        return name in self.fields

    # -- a settings object built from the table --------------------------------------------------------------
    # A service holds each of its settings as an attribute named after the variable (lowercased) unless the
    # service says otherwise, so a new plain setting is one row in the table plus its use: no attribute and no
    # `get` to add by hand. `renamed` gives an attribute its own name; `apart` lists the rows not held (a secret,
    # an opt-out that only a rule reads, a row folded into another's value).
    def attributes(self, renamed: Mapping[str, str] | None = None, apart: Iterable[str] = ()) -> list[tuple]:
        """`dataclasses.make_dataclass`'s fields: (attribute, type, field(default=the row's default))."""
        import dataclasses

        held = self._held(renamed, apart)
        return [(attr, Any, dataclasses.field(default=self.fields[name].default)) for name, attr in held]

    def read_all(
        self,
        read: Env,
        renamed: Mapping[str, str] | None = None,
        apart: Iterable[str] = (),
        given: Mapping[str, Any] | None = None,
    ) -> dict:
        """Every held row by attribute, in the table's order: read through `read`, or, for a row in `given`, the
        service's own value (a callable is called at the row's turn, so refusals keep the table's order)."""
        given = dict(given or {})
        unknown = set(given) - set(self.fields)
        if unknown:
            raise ValueError(f"not in this table: {', '.join(sorted(unknown))}")
        out = {}
        for name, attr in self._held(renamed, apart):
            value = given[name] if name in given else read.get(self.fields[name])
            out[attr] = value() if callable(value) else value
        return out

    def _held(self, renamed: Mapping[str, str] | None, apart: Iterable[str]) -> list[tuple[str, str]]:
        renamed, apart = dict(renamed or {}), set(apart)
        unknown = (set(renamed) | apart) - set(self.fields)
        if unknown:
            raise ValueError(f"not in this table: {', '.join(sorted(unknown))}")
        return [(name, renamed.get(name, name.lower())) for name in self.fields if name not in apart]


class Env:
    def __init__(self, env: Mapping[str, str] | None = None, *, collect: bool = False) -> None:
        self.env = os.environ if env is None else env
        self.collect = collect
        self.problems: list[str] = []

    # -- plumbing --------------------------------------------------------------------------------
    def raw(self, name: str) -> str | None:
        """The stripped value, or None when unset or empty (or refused: see below).

        One rule for every setting: a value with a control character inside it is refused here, where every
        reader starts. A newline in MODEL, HUB_MODEL_ID or DIRECT_URL passes every other check and fails
        hours later (a push, a URL, a log line split in two); a tab or NUL is never meant either. Whitespace
        around the value (a CRLF .env's trailing \\r included) is stripped, as before."""
        value = self.env.get(name)
        if value is None or not value.strip():
            return None
        value = value.strip()
        at = _control_character(value)
        if at is not None:
            return self.refuse(
                f"{name}={shown(name, value)} contains a control character ({value[at]!r} at character {at + 1}): "
                f"set {name} to one line of printable text",
                None,
            )
        return value

    def refuse(self, line: str, default: T) -> T:
        """Report one bad setting: raise it, or (collecting) record it and carry on with the default."""
        if not self.collect:
            raise EnvError(line)
        if line not in self.problems:  # a setting read twice is still one problem
            self.problems.append(line)
        return default

    def check(self) -> None:
        """After collecting: raise every recorded problem at once, one per line."""
        if self.problems:
            raise EnvError(self.problems)

    def get(self, field: Field, default: Any = _UNSET) -> Any:
        """A declared field, read with its own type, bounds and fix text (`default` for derived ones)."""
        return field.read(self, default)

    # -- what the operator wrote, whatever its reader made of it ---------------------------------------------
    # A rule that asks "did the operator say anything?" must not take a refused value (read as its default) for
    # silence: that would add a second, wrong line about the same setting.
    def is_set(self, field: Field | str) -> bool:
        """The variable holds something other than blanks (a value its reader refused included)."""
        return bool(self.as_given(field).strip())

    def is_given(self, field: Field | str) -> bool:
        """The variable is in the environment at all: compose's `${X:-}` gives it empty, which says "none"."""
        return (field if isinstance(field, str) else field.name) in self.env

    def as_given(self, field: Field | str) -> str:
        """The value exactly as the environment holds it ("" when unset): for a reader of its own that must see
        what `raw` strips or refuses (a line break inside a list, say)."""
        return self.env.get(field if isinstance(field, str) else field.name) or ""

    @staticmethod
    def _default(default: object) -> str:
        return "" if default is None or default == "" else f" (default {default})"

    # -- readers ---------------------------------------------------------------------------------
    def text(self, name: str, default: str = "") -> str:
        raw = self.raw(name)
        return default if raw is None else raw

    def integer(
        self,
        name: str,
        default: int,
        *,
        minimum: int | None = None,
        maximum: int | None = None,
        fix: str = "",
        fix_above: str = "",
    ) -> int:
        raw = self.raw(name)
        if raw is None:
            return default
        try:
            value = int(raw)
        except ValueError:
            return self.refuse(
                f"{name}={raw!r} is not a whole number: {fix or f'set {name} to an integer'}{self._default(default)}",
                default,
            )
        return self._bounded(name, raw, value, default, minimum, maximum, fix, fix_above)

    def number(
        self,
        name: str,
        default: float,
        *,
        minimum: float | None = None,
        maximum: float | None = None,
        above: float | None = None,
        fix: str = "",
        fix_above: str = "",
    ) -> float:
        """A finite float; `above` is a strict lower bound (a learning rate of 0 is no learning rate)."""
        raw = self.raw(name)
        if raw is None:
            return default
        try:
            value = float(raw)
        except ValueError:
            return self.refuse(
                f"{name}={raw!r} is not a number: {fix or f'set {name} to a number'}{self._default(default)}", default
            )
        if value != value or value in (float("inf"), float("-inf")):
            return self.refuse(
                f"{name}={raw!r} is not a finite number: {fix or f'set {name} to a number'}{self._default(default)}",
                default,
            )
        if above is not None and value <= above:
            return self.refuse(
                f"{name}={raw!r} is not above {_n(above)}: {fix or f'set {name} above {_n(above)}'}{self._default(default)}",
                default,
            )
        return self._bounded(name, raw, value, default, minimum, maximum, fix, fix_above)

    def _bounded(self, name, raw, value, default, minimum, maximum, fix, fix_above=""):
        if minimum is not None and value < minimum:
            return self.refuse(
                f"{name}={raw!r} is below {_n(minimum)}: {fix or f'set {name} to at least {_n(minimum)}'}"
                f"{self._default(default)}",
                default,
            )
        if maximum is not None and value > maximum:
            return self.refuse(
                f"{name}={raw!r} is above {_n(maximum)}: {fix_above or fix or f'set {name} to at most {_n(maximum)}'}"
                f"{self._default(default)}",
                default,
            )
        return value

    def flag(self, name: str, default: bool) -> bool:
        raw = self.raw(name)
        if raw is None:
            return default
        if raw.lower() in TRUE_WORDS:
            return True
        if raw.lower() in FALSE_WORDS:
            return False
        return self.refuse(
            f"{name}={raw!r} is not a yes/no value: set {name} to 1 or 0 (default {1 if default else 0})", default
        )

    def choice(
        self,
        name: str,
        default: str,
        choices: Iterable[str],
        *,
        aliases: Mapping[str, str] | None = None,
        fix: str = "",
    ) -> str:
        """One of `choices` (case-insensitive); `aliases` map other accepted spellings onto a choice."""
        choices = tuple(choices)
        raw = self.raw(name)
        if raw is None:
            return default
        value = raw.lower()
        value = (aliases or {}).get(value, value)
        if value in choices:
            return value
        return self.refuse(
            f"{name}={raw!r} is not allowed: {fix or f'set {name} to one of ' + ', '.join(choices)}"
            f"{self._default(default)}",
            default,
        )

    def url(self, name: str, default: str = "", *, fix: str = "") -> str:
        """An http(s) URL without a trailing slash."""
        raw = self.raw(name)
        if raw is None:
            return default
        scheme, sep, rest = raw.partition("://")
        if not sep or scheme.lower() not in ("http", "https") or not rest.strip("/"):
            example = default or "http://127.0.0.1:8000"
            return self.refuse(f"{name}={raw!r} is not an http(s) URL: {fix or f'set {name} like {example}'}", default)
        return raw.rstrip("/")

    def path(self, name: str, default: str = "") -> str:
        """An absolute path (a relative one would depend on the working directory of whoever reads it)."""
        raw = self.raw(name)
        if raw is None:
            return default
        if not raw.startswith("/"):
            return self.refuse(
                f"{name}={raw!r} is not an absolute path: set {name} to a path starting with /{self._default(default)}",
                default,
            )
        return raw.rstrip("/") or "/"

    def port(self, name: str, default: int | None) -> int | None:
        """A TCP port; `default=None` makes the port optional (unset reads as None)."""
        raw = self.raw(name)
        if raw is None:
            return default
        if not raw.isdigit() or not 0 < int(raw) < 65536:
            return self.refuse(
                f"{name}={raw!r} is not a TCP port: set {name} to a number in 1-65535{self._default(default)}",
                default,
            )
        return int(raw)
