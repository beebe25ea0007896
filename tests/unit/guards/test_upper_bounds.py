"""Every numeric setting has an upper bound, and preflight refuses a value above it in one line that names the
variable, the value and the fix (issue 29: a timeout of 10^9 s, a count no run reaches, can only be a typo).
Host venv, no Docker."""

import pytest
from settings_tables import FIELDS
from test_checks import GCSFUSE, good_env, probes_for

from guards import checks
from guards.checks import run_all
from stack import fields
from stack.env import Env, _n
from stack.readers import trainer as config
from stack.readers import trainer_health

# Numeric fields without a maximum of their own, each for a reason. Anything else unbounded is a finding.
UNBOUNDED = {
    # Owned by services/engine and services/mock_engine (other work streams): bounds to add there.
    "ENGINE_TENSOR_PARALLEL_SIZE",
    "ENGINE_DATA_PARALLEL_SIZE",
    "MOCK_MAX_MODEL_LEN",
    "MOCK_MAX_NEW_TOKENS",
    "MOCK_MAX_NUM_SEQS",
    "MOCK_TORCH_THREADS",
    # Held to at most MAX_STEPS by the stop rules' own reader (stack/readers/stop_rules.py), itself bounded.
    "STOP_WINDOW_STEPS",
}


def test_every_numeric_setting_has_an_upper_bound():
    numeric = {f.name for f in FIELDS.values() if f.kind in ("integer", "number")}
    assert {name for name in numeric if FIELDS[name].maximum is None} == UNBOUNDED
    assert UNBOUNDED <= numeric  # an exemption whose field is gone goes too


# The tables preflight reads, through the services' own readers (guards/checks.py).
PREFLIGHT_TABLES = [
    fields.SHARED,
    config.FIELDS,
    checks.FIELDS,
    trainer_health.FIELDS,
    *(__import__(m, fromlist=["FIELDS"]).FIELDS for m in ("stack.readers.env_server", "stack.readers.tunnel_check")),
]
BOUNDED = sorted(
    {
        f.name: f
        for table in PREFLIGHT_TABLES
        for f in table
        if f.kind in ("integer", "number") and f.maximum is not None
    }.items()
)


def above(field) -> str:
    """A value just past the field's maximum, as an operator would write it."""
    return str(int(field.maximum) + 1) if field.kind == "integer" else f"{field.maximum * 2:g}"


@pytest.mark.parametrize(("name", "field"), BOUNDED, ids=[n for n, _ in BOUNDED])
def test_preflight_refuses_a_value_above_the_bound_in_one_line(tmp_path, name, field):
    value = above(field)
    found = [
        (f.check, f.message)
        for f in run_all(good_env(tmp_path, **{name: value}), probes_for(tmp_path, GCSFUSE))
        if f.check != "weight-transfer"
    ]
    assert len(found) == 1, found
    line = found[0][1]
    assert line.startswith(f"{name}={value!r} is above {_n(field.maximum)}: "), line
    assert "\n" not in line and "set " in line  # the fix


@pytest.mark.parametrize(("name", "field"), BOUNDED, ids=[n for n, _ in BOUNDED])
def test_the_bound_itself_is_accepted(name, field):
    read = Env({name: _n(field.maximum)}, collect=True)
    assert read.get(field) == field.maximum and read.problems == []


@pytest.mark.parametrize(
    ("name", "value", "line"),
    [
        (
            "AGENT_STEP_LIMIT",
            "5000",
            "AGENT_STEP_LIMIT='5000' is above 1000: set it to at most 1000 model calls (58-turn rollouts already ran "
            "an 80 GiB card out of memory; agent benchmarks stop at 100-250) (default 12)",
        ),
        (
            "NUM_GENERATIONS",
            "5000",
            "NUM_GENERATIONS='5000' is above 1024: set it to at most 1024 (each rollout of a group is a paid sandbox; "
            "groups of 8-64 are usual) (default 8)",
        ),
        (
            "ENGINE_MAX_MODEL_LEN",
            "1000000000",
            "ENGINE_MAX_MODEL_LEN='1000000000' is above 1048576: set ENGINE_MAX_MODEL_LEN to at most 1048576 "
            "(default 32768)",
        ),
        (
            "AGENT_TIMEOUT_S",
            "1e9",
            "AGENT_TIMEOUT_S='1e9' is above 86400: set AGENT_TIMEOUT_S to at most 86400 (default 900.0)",
        ),
        (
            "TEMPERATURE",
            "100",
            "TEMPERATURE='100' is above 10: set it to at most 10, e.g. 1.0 (above a few every sampled token is noise) "
            "(default 1.0)",
        ),
        (
            "MAX_STEPS",
            "1000000000",
            "MAX_STEPS='1000000000' is above 1000000: set MAX_STEPS to at most 1000000 (default 200)",
        ),
        (
            "TRAINER_STALE_S",
            "1e9",
            "TRAINER_STALE_S='1e9' is above 86400: set it to at most 86400 seconds (a day), e.g. 1800 (default 1800.0)",
        ),
        (
            "REQUIRED_GPUS",
            "200",
            "REQUIRED_GPUS='200' is above 64: set it to the GPUs this host must have, at most 64 (2; 1 in the one-GPU "
            "form; 0 in the CPU form) (default 2)",
        ),
        (
            "TUNNEL_CHECK_FAILURES_TO_WITHDRAW",
            "1000",
            "TUNNEL_CHECK_FAILURES_TO_WITHDRAW='1000' is above 100: set TUNNEL_CHECK_FAILURES_TO_WITHDRAW to at most "
            "100 (default 2)",
        ),
    ],
)
def test_typos_get_their_exact_line(tmp_path, name, value, line):
    found = [f.message for f in run_all(good_env(tmp_path, **{name: value}), probes_for(tmp_path, GCSFUSE))]
    assert [m for m in found if m.startswith(f"{name}=")] == [line]


def test_the_withdraw_bound_is_held_across_its_three_settings(tmp_path):
    """Each of interval, failures and timeout is within its own bound; together they would keep a dead URL
    published for over an hour."""
    env = good_env(
        tmp_path, TUNNEL_CHECK_INTERVAL_S="600", TUNNEL_CHECK_FAILURES_TO_WITHDRAW="6", TUNNEL_CHECK_TIMEOUT_S="30"
    )
    found = [(f.check, f.message) for f in run_all(env, probes_for(tmp_path, GCSFUSE)) if f.check != "weight-transfer"]
    assert found == [
        (
            "tunnel-settings",
            "TUNNEL_CHECK_INTERVAL_S=600 x TUNNEL_CHECK_FAILURES_TO_WITHDRAW=6 + TUNNEL_CHECK_TIMEOUT_S=30 = 3630 s: "
            "a URL that stops serving would stay published that long, and every rollout started meanwhile fails; "
            "keep it at most 1800 s (the defaults give 28 s)",
        )
    ]
    # 30 s x 5 on a flaky network (under 3 minutes) is fine.
    env = good_env(tmp_path, TUNNEL_CHECK_INTERVAL_S="30", TUNNEL_CHECK_FAILURES_TO_WITHDRAW="5")
    assert [f for f in run_all(env, probes_for(tmp_path, GCSFUSE)) if f.check == "tunnel-settings"] == []


def test_max_staleness_is_bounded_like_max_steps():
    assert config.read({"MAX_STALENESS": "1000000"})[0].max_staleness == 1_000_000
    assert config.read({"MAX_STALENESS": "99999999999999999999"})[1] == [
        "MAX_STALENESS='99999999999999999999' is above 1000000: set it to at most MAX_STEPS' bound, or auto (4 x the "
        "steps one group spans)"
    ]


def test_eval_pass_k_is_held_to_the_attempts_bound():
    """EVAL_ATTEMPTS defaults to the largest k, read unbounded as a default: the k itself is held to the bound."""
    _settings, problems = config.read({"EVAL_PASS_K": "1,100000"})
    assert problems == [
        "EVAL_PASS_K=1,100000 asks for pass@100000: set each k to at most 1000 (EVAL_ATTEMPTS' bound: scored "
        "attempts per eval task)"
    ]
