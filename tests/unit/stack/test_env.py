"""The environment readers: each bad value is ONE line naming the variable, the value and the fix."""

from __future__ import annotations

import pytest

from stack.endpoints import openai_base, read_engine_url
from stack.env import Env, EnvError, Field, Table


def refused(env: dict, read) -> str:
    with pytest.raises(EnvError) as info:
        read(Env(env))
    message = str(info.value)
    assert "\n" not in message
    return message


def test_unset_and_empty_mean_the_default():
    read = Env({"A": "", "B": "  "})
    assert read.integer("A", 3) == 3 and read.number("B", 1.5) == 1.5 and read.text("C", "x") == "x"
    assert read.port("A", None) is None and read.flag("B", True) is True and read.choice("A", "e2b", ("e2b",)) == "e2b"


def test_an_integer_is_read_whole_and_a_bad_one_is_one_line_naming_its_bound_and_default():
    assert Env({"N": " 7 "}).integer("N", 1) == 7
    assert refused({"N": "seven"}, lambda r: r.integer("N", 12)) == (
        "N='seven' is not a whole number: set N to an integer (default 12)"
    )
    assert refused({"N": "0"}, lambda r: r.integer("N", 12, minimum=1)) == (
        "N='0' is below 1: set N to at least 1 (default 12)"
    )
    assert refused({"N": "9"}, lambda r: r.integer("N", 2, maximum=8)) == (
        "N='9' is above 8: set N to at most 8 (default 2)"
    )
    assert refused({"N": "-1"}, lambda r: r.integer("N", 2, minimum=0, fix="set it to the GPUs you have")) == (
        "N='-1' is below 0: set it to the GPUs you have (default 2)"
    )


def test_a_number_must_be_finite_and_within_its_bounds():
    assert Env({"X": "1e-6"}).number("X", 1.0) == 1e-6
    assert refused({"X": "fast"}, lambda r: r.number("X", 10.0)) == (
        "X='fast' is not a number: set X to a number (default 10.0)"
    )
    assert refused({"X": "nan"}, lambda r: r.number("X", 10.0)) == (
        "X='nan' is not a finite number: set X to a number (default 10.0)"
    )
    assert refused({"X": "0.1"}, lambda r: r.number("X", 10.0, minimum=0.2)) == (
        "X='0.1' is below 0.2: set X to at least 0.2 (default 10.0)"
    )


def test_a_fix_for_each_end_of_the_range():
    """`fix` speaks of the lower end (why 0 is wrong); `fix_above` of the upper one, so neither line says the
    other's reason. Without `fix_above` the upper line falls back to `fix`, as before."""
    limit = Field(
        "LIMIT", "integer", 12, "calls", fix="set a positive number", minimum=1, maximum=1000, fix_above="at most 1000"
    )
    assert refused({"LIMIT": "0"}, limit.read) == "LIMIT='0' is below 1: set a positive number (default 12)"
    assert refused({"LIMIT": "1001"}, limit.read) == "LIMIT='1001' is above 1000: at most 1000 (default 12)"
    rate = Field("RATE", "number", 0.5, "a rate", fix="set it in (0, 1]", above=0, maximum=1)
    assert refused({"RATE": "2"}, rate.read) == "RATE='2' is above 1: set it in (0, 1] (default 0.5)"


def test_large_bounds_are_printed_whole():
    """:g printed a bound of a million as 1e+06, a step count no operator writes."""
    assert refused({"N": "2000000"}, lambda r: r.integer("N", 5, maximum=1_000_000)) == (
        "N='2000000' is above 1000000: set N to at most 1000000 (default 5)"
    )
    assert refused({"X": "0.5"}, lambda r: r.number("X", 1e-6, maximum=0.01)) == (
        "X='0.5' is above 0.01: set X to at most 0.01 (default 1e-06)"
    )


def test_a_flag_takes_yes_no_words_in_any_case_and_refuses_the_rest():
    assert Env({"F": "no"}).flag("F", True) is False and Env({"F": "ON"}).flag("F", False) is True
    assert refused({"F": "maybe"}, lambda r: r.flag("F", True)) == (
        "F='maybe' is not a yes/no value: set F to 1 or 0 (default 1)"
    )


def test_choice_is_case_insensitive_and_takes_aliases():
    assert Env({"S": "Docker"}).choice("S", "e2b", ("e2b", "docker")) == "docker"
    aliases = {"cloudflare": "cloudflared"}
    assert Env({"T": "cloudflare"}).choice("T", "direct", ("cloudflared", "direct"), aliases=aliases) == "cloudflared"
    assert refused({"S": "modal"}, lambda r: r.choice("S", "e2b", ("e2b", "docker"))) == (
        "S='modal' is not allowed: set S to one of e2b, docker (default e2b)"
    )


def test_url_and_path_and_port():
    assert Env({"U": "https://x.example/"}).url("U") == "https://x.example"
    assert refused({"U": "x.example:8100"}, lambda r: r.url("U", "http://127.0.0.1:8000")) == (
        "U='x.example:8100' is not an http(s) URL: set U like http://127.0.0.1:8000"
    )
    assert Env({"P": "/handoff/"}).path("P") == "/handoff"
    assert refused({"P": "handoff"}, lambda r: r.path("P", "/handoff")) == (
        "P='handoff' is not an absolute path: set P to a path starting with / (default /handoff)"
    )
    assert Env({"Q": "8100"}).port("Q", 1) == 8100
    assert refused({"Q": "70000"}, lambda r: r.port("Q", 8100)) == (
        "Q='70000' is not a TCP port: set Q to a number in 1-65535 (default 8100)"
    )


def test_collecting_reports_every_problem_at_once_and_carries_on_with_defaults():
    read = Env({"A": "x", "B": "0", "C": "5"}, collect=True)
    assert (read.integer("A", 1), read.integer("B", 2, minimum=1), read.integer("C", 3)) == (1, 2, 5)
    assert read.problems == [
        "A='x' is not a whole number: set A to an integer (default 1)",
        "B='0' is below 1: set B to at least 1 (default 2)",
    ]
    with pytest.raises(EnvError) as info:
        read.check()
    assert str(info.value).splitlines() == read.problems
    Env({}, collect=True).check()  # nothing collected, nothing raised


def test_engine_url_is_the_root_and_v1_is_added_in_one_place():
    assert read_engine_url(Env({})) == "http://127.0.0.1:8001"
    assert read_engine_url(Env({"ENGINE_URL": "http://10.0.0.2:9000/"})) == "http://10.0.0.2:9000"
    assert openai_base("http://10.0.0.2:9000") == "http://10.0.0.2:9000/v1"
    assert refused({"ENGINE_URL": "http://127.0.0.1:8001/v1"}, read_engine_url) == (
        "ENGINE_URL='http://127.0.0.1:8001/v1' ends in /v1: set the engine's root, e.g. http://127.0.0.1:8001 "
        "(/v1 is added where the OpenAI API is called)"
    )


def test_a_declared_field_reads_with_its_own_type_bounds_and_fix():
    from stack.env import Field, Table

    steps = Field("STEPS", "integer", 200, "optimizer steps", fix="set a positive number of steps", minimum=1)
    assert Env({}).get(steps) == 200 and Env({"STEPS": " 7 "}).get(steps) == 7
    assert Env({}).get(steps, 5) == 5  # a derived default, passed by the reader
    assert refused({"STEPS": "0"}, lambda r: r.get(steps)) == (
        "STEPS='0' is below 1: set a positive number of steps (default 200)"
    )
    words = Field("SPLITS", "words", ("a",), "splits")
    assert Env({"SPLITS": " x, ,y "}).get(words) == ("x", "y") and Env({"SPLITS": " "}).get(words) == ("a",)
    phrase = Field("OPT_OUT", "phrase", "", "opt-out", fix="set it to exactly i-mean-it", choices=("i-mean-it",))
    assert Env({"OPT_OUT": "i-mean-it"}).get(phrase) == "i-mean-it" and Env({}).get(phrase) == ""
    assert refused({"OPT_OUT": "yes"}, lambda r: r.get(phrase)) == (
        "OPT_OUT='yes' is not the opt-out phrase: set it to exactly i-mean-it"
    )
    table = Table(steps, Table(words))
    assert [f.name for f in table] == ["STEPS", "SPLITS"] and "SPLITS" in table
    with pytest.raises(ValueError, match="STEPS is declared twice"):
        Table(steps, Field("STEPS", "integer", 1))
    with pytest.raises(ValueError, match="unknown kind"):
        Field("X", "float")


def test_one_exception_lists_every_problem():
    read = Env({"A": "x", "B": "y"}, collect=True)
    read.integer("A", 1), read.number("B", 1.0)
    with pytest.raises(EnvError) as info:
        read.check()
    assert info.value.problems == str(info.value).splitlines() and len(info.value.problems) == 2


@pytest.mark.parametrize(
    ("kind", "value", "where"),
    [
        ("text", "Qwen/Qwen3\n-1.7B", "'\\n' at character 11"),
        ("integer", "2\n00", "'\\n' at character 2"),
        ("number", "1e-6\x00", "'\\x00' at character 5"),
        ("flag", "1\x1b", "'\\x1b' at character 2"),
        ("choice", "e2b\tx", "'\\t' at character 4"),
        ("url", "http://a\rb:8100", "'\\r' at character 9"),
        ("path", "/bucket\n/x", "'\\n' at character 8"),
        ("port", "8\n1", "'\\n' at character 2"),
        ("words", "A,B\nC", "'\\n' at character 4"),
        ("phrase", "i-accept\n", None),  # trailing whitespace is stripped: then it is just the wrong phrase
    ],
)
def test_a_control_character_is_refused_in_every_kind_of_setting(kind, value, where):
    """One rule in Env.raw, where every reader starts: no field can forget it."""
    field = Field("X_SETTING", kind, None, "a test field", choices=("e2b", "docker") if kind == "choice" else ("ok",))
    message = refused({"X_SETTING": value}, lambda env: env.get(field))
    if where is None:
        assert "control character" not in message
    else:
        assert message == (
            f"X_SETTING={value.strip()!r} contains a control character ({where}): set X_SETTING to one line of "
            "printable text"
        )


def test_a_secret_with_a_control_character_is_never_printed():
    Field("X_SECRET_FIELD", "text", "", "a declared secret", secret=True)
    for name in ("X_SECRET_FIELD", "SOME_API_KEY", "HF_TOKEN"):
        assert refused({name: "s3cr3t\nvalue"}, lambda env, n=name: env.text(n)) == (
            f"{name}=<secret, 12 characters> contains a control character ('\\n' at character 7): set {name} to one "
            "line of printable text"
        )


def test_a_setting_read_twice_is_one_problem():
    env = Env({"MODEL": "a\nb"}, collect=True)
    env.text("MODEL")
    env.text("MODEL")
    assert env.problems == [
        "MODEL='a\\nb' contains a control character ('\\n' at character 2): set MODEL to one line of printable text"
    ]


def test_what_the_operator_wrote_is_asked_of_the_reader_not_of_its_mapping():
    port = Field("X_PORT_GIVEN", "port", None, "a port")
    read = Env({"X_PORT_GIVEN": "seventy", "X_EMPTY": "", "X_BLANK": "  ", "X_LIST": "a,\nb"}, collect=True)
    assert read.get(port) is None  # refused: read as its default
    assert read.is_set(port) and read.is_given(port)  # yet the operator did say something
    assert read.is_given("X_EMPTY") and not read.is_set("X_EMPTY")  # compose's ${X:-}: said, and empty
    assert not read.is_set("X_BLANK") and not read.is_given("X_UNSET") and not read.is_set("X_UNSET")
    assert read.as_given("X_LIST") == "a,\nb" and read.as_given("X_UNSET") == ""


def test_a_settings_object_is_built_from_its_table():
    """A plain row is an attribute with its default and its reader, with nothing else to write; `renamed`,
    `apart` and `given` say where a service holds a row otherwise, and refusals keep the table's order."""
    import dataclasses

    table = Table(
        Field("X_ROWS_A", "integer", 1, "a", minimum=0),
        Field("X_ROWS_KEY", "text", "", "a secret, never held", secret=True),
        Field("X_ROWS_LONG_NAME_S", "number", 2.0, "renamed"),
        Field("X_ROWS_C", "integer", 3, "derived by the service", minimum=0),
    )
    held = dict(renamed={"X_ROWS_LONG_NAME_S": "wait_s"}, apart=("X_ROWS_KEY",))
    Rows = dataclasses.make_dataclass("Rows", table.attributes(**held), frozen=True)
    assert [f.name for f in dataclasses.fields(Rows)] == ["x_rows_a", "wait_s", "x_rows_c"]
    assert Rows() == Rows(x_rows_a=1, wait_s=2.0, x_rows_c=3)
    read = Env({"X_ROWS_A": "-1", "X_ROWS_LONG_NAME_S": "5"}, collect=True)
    order = []
    values = table.read_all(read, **held, given={"X_ROWS_C": lambda: order.append(len(read.problems)) or 9})
    assert values == {"x_rows_a": 1, "wait_s": 5.0, "x_rows_c": 9}
    assert order == [1]  # X_ROWS_C's value was made after X_ROWS_A's refusal, at its row's turn
    with pytest.raises(ValueError, match="not in this table: X_NOPE"):
        table.attributes(apart=("X_NOPE",))
