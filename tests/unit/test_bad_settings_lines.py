"""Issue 29's table: each wrong setting it found accepted in silence or answered imperfectly, and the line
preflight now prints for it, run through preflight itself (guards.checks.run_all, which calls every service's
own reader) on an otherwise valid CPU-form environment in which preflight finds nothing. Host venv, no Docker.

The same cases print the issue's table, from the real readers:
    .venv/bin/python tests/unit/test_bad_settings_lines.py
"""

from __future__ import annotations

import re
import socket
import sys
import tempfile
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import pytest

# Where a line carries text that is not this stack's (huggingface_hub's validator message), the expected line
# says only what is ours on either side of this mark.
ANY = "…"
# A fix is an instruction, or the range the value must be in ("must be below TUNNEL_CHECK_INTERVAL_S=10").
FIX = re.compile(r"\b(set|remove|list|stop|leave|unset|turn|use|must be)\b")


@dataclass(frozen=True)
class Case:
    setting: str
    value: str
    # The exact line (what follows `[check] ` in preflight's output); {NAME} is the environment's value of NAME
    # (a free port the test picked), ANY marks text that is not ours.
    line: str
    check: str  # the preflight check, i.e. whose reader says it
    also: Mapping[str, str] = field(default_factory=dict)  # settings the case needs, each valid by itself
    # Ports held by a process outside this stack while preflight runs: the setting's own, and these besides
    # (each of which must get a line of its own, not one line joined with "; ").
    held: tuple[str, ...] = ()
    shown: str = ""  # the value as the table shows it, where it is not the value itself
    # A compose-internal name the line must not use in place of the operator's (the MAX_COMPLETION_TOKENS).
    inner: str = ""


CASES = [
    # -- accepted in silence (issue 29) -------------------------------------------------------------------------
    Case(
        "LEARNING_RATE",
        "1e9",
        "LEARNING_RATE='1e9' is above 0.01: set it in (0, 0.01], e.g. 1e-6 (RL fine-tuning runs at 1e-7..1e-5; AdamW "
        "moves every weight by about this much per step, so 0.01 and up wrecks a pretrained model) (default 1e-06)",
        "trainer-settings",
    ),
    Case(
        "STOP_WINDOW_STEPS",
        "1000000000",
        "STOP_WINDOW_STEPS=1000000000 is longer than the run (MAX_STEPS=200), so the window never fills and no stop "
        "rule can fire: set STOP_WINDOW_STEPS to at most 200 (default 5), or turn the rules off (STOP_FORKING_FRAC=off "
        "STOP_UNSCORABLE_FRAC=off STOP_ZERO_SPREAD_FRAC=off STOP_STALE_FRAC=off STOP_MISMATCH_KL=off)",
        "stop-rules",
    ),
    Case(
        "HUB_MODEL_ID",
        "https://huggingface.co/me/qwen3-grpo",
        f"HUB_MODEL_ID='https://huggingface.co/me/qwen3-grpo' is not a Hub repository id ({ANY}): set it like "
        "your-name/qwen3-harbor-grpo, or leave it empty to push nothing",
        "trainer-settings",
    ),
    # A line break inside the value: one at either end is stripped as whitespace (a CRLF .env's \r too), harmless.
    Case(
        "HUB_MODEL_ID",
        "me/qwen3-grpo\nme/qwen3-grpo-v2",
        "HUB_MODEL_ID='me/qwen3-grpo\\nme/qwen3-grpo-v2' contains a control character ('\\n' at character 14): set "
        "HUB_MODEL_ID to one line of printable text",
        "trainer-settings",
    ),
    Case(
        "MODEL",
        "Qwen/Qwen3-1.7B\nQwen/Qwen3-4B",
        "MODEL='Qwen/Qwen3-1.7B\\nQwen/Qwen3-4B' contains a control character ('\\n' at character 16): set MODEL to "
        "one line of printable text",
        "trainer-settings",
    ),
    Case(
        "CAPTURE_MAX_BODY_MB",
        "100000",
        "CAPTURE_MAX_BODY_MB='100000' is above 64: set it in 1-64 (a full 32k-token context is ~150 KB of JSON; each "
        "request's body is held in memory) (default 8)",
        "env-server-settings",
    ),
    Case(
        "CAPTURE_HOST",
        "10.0.0.5",
        "CAPTURE_HOST='10.0.0.5' with TUNNEL_PROVIDER=cloudflared would serve the capture proxy on that address as "
        "well as through the tunnel: set CAPTURE_HOST=127.0.0.1 (or 172.17.0.1, the Docker bridge), or, to publish it "
        "there on purpose, CAPTURE_HOST_BEYOND_TUNNEL_OK=publish-the-capture-proxy-beyond-the-tunnel",
        "env-server-settings",
        also={"TUNNEL_PROVIDER": "cloudflared"},
    ),
    Case(
        "TASK_ENV_ALLOW",
        "*",
        "TASK_ENV_ALLOW='*' entry '*' is not a variable name (wildcards and patterns are not expanded): list each "
        "variable a task may read by its exact name, comma-separated, e.g. TASK_ENV_ALLOW=TEST_DIR,MY_VAR",
        "env-server-settings",
    ),
    Case(
        "TASK_ENV_ALLOW",
        "E2B_API_KEY,HF_TOKEN",
        "TASK_ENV_ALLOW='E2B_API_KEY,HF_TOKEN' entries 'E2B_API_KEY', 'HF_TOKEN' name secrets, and tasks run code "
        "from the dataset and from the model being trained, which would read them: remove E2B_API_KEY and HF_TOKEN "
        "from TASK_ENV_ALLOW (a task that needs a credential of its own gets it as a literal in its task.toml env "
        "table)",
        "env-server-settings",
    ),
    Case(
        "TASK_ENV_ALLOW",
        "TEST_DIR\nMY_VAR",
        "TASK_ENV_ALLOW='TEST_DIR\\nMY_VAR' has a line break: list the names on one line, comma-separated "
        "(TASK_ENV_ALLOW=A,B)",
        "env-server-settings",
    ),
    # Where DIRECT_URL is used at all: a direct capture port, https for E2B sandboxes.
    Case(
        "DIRECT_URL",
        "https://capture.example.com\n:8100",
        "DIRECT_URL='https://capture.example.com\\n:8100' contains a control character ('\\n' at character 28): set "
        "DIRECT_URL to one line of printable text",
        "env-server-settings",
        also={"TUNNEL_PROVIDER": "direct", "COMPOSE_PROFILES": ""},
    ),
    # -- imperfect lines (issue 29) -----------------------------------------------------------------------------
    Case(
        "MAX_OUTPUT_TOKENS",
        "0",
        "MAX_OUTPUT_TOKENS='0' is below 1: set MAX_OUTPUT_TOKENS to at least 1 (default 4096)",
        "trainer-settings",
        inner="MAX_COMPLETION_TOKENS",
    ),
    *(
        Case(
            port,
            "",
            f"port {{{port}}} ({port}) is already in use on this host by something other than this stack's "
            f"env-server: stop what holds it (`ss -ltnp 'sport = :{{{port}}}'`) or set {port} to a free port",
            "ports",
            held=(other,),
            shown=f"a free port, then held by another process ({other}'s too)",
        )
        for port, other in (("ENV_SERVER_PORT", "CAPTURE_PORT"), ("CAPTURE_PORT", "ENV_SERVER_PORT"))
    ),
    # -- checked too late (issue 29): env-server's capture-port settings and tunnel-check's, seen by preflight ---
    Case(
        "CAPTURE_MAX_CONCURRENT",
        "0",
        "CAPTURE_MAX_CONCURRENT='0' is below 1: set it in 1-1024 (one call per in-flight rollout is enough: "
        "MAX_INFLIGHT_ROLLOUTS) (default 64)",
        "env-server-settings",
    ),
    Case(
        "CAPTURE_HOST",
        "0.0.0.0",
        "CAPTURE_HOST='0.0.0.0' would publish the capture proxy on every interface: set it to 127.0.0.1 (behind a "
        "tunnel) or to the one address the sandboxes route to (TUNNEL_PROVIDER=direct)",
        "env-server-settings",
    ),
    Case(
        "DIRECT_URL",
        "http://capture.example.com:8100",
        "DIRECT_URL=http://capture.example.com:8100 is plain http but SANDBOX=e2b sandboxes reach it across the "
        "internet, where each sandbox's session key would travel in clear text: put TLS in front of the capture port "
        "and use an https:// DIRECT_URL, or use TUNNEL_PROVIDER=cloudflared",
        "env-server-settings",
        also={"TUNNEL_PROVIDER": "direct", "COMPOSE_PROFILES": ""},
    ),
    Case(
        "TUNNEL_CHECK_INTERVAL_S",
        "0",
        "TUNNEL_CHECK_INTERVAL_S='0' is below 0.2: set TUNNEL_CHECK_INTERVAL_S to at least 0.2 (default 10.0)",
        "tunnel-settings",
    ),
    Case(
        "TUNNEL_CHECK_TIMEOUT_S",
        "20",
        "TUNNEL_CHECK_TIMEOUT_S=20 must be below TUNNEL_CHECK_INTERVAL_S=10: checks run on a fixed schedule and one "
        "must end before the next starts, or the withdraw bound no longer holds",
        "tunnel-settings",
    ),
    Case(
        "TUNNEL_CHECK_FAILURES_TO_WITHDRAW",
        "1000",
        "TUNNEL_CHECK_FAILURES_TO_WITHDRAW='1000' is above 100: set TUNNEL_CHECK_FAILURES_TO_WITHDRAW to at most 100 "
        "(default 2)",
        "tunnel-settings",
    ),
]


def base_env(folder: Path, ports: list[int]) -> dict[str, str]:
    """An environment in which preflight finds nothing: the CPU form (no GPU to count, the mock engine's weight
    transfer, which the host venv has), a plain-folder bucket by the opt-out, E2B sandboxes (no Docker socket)."""
    from guards.checks import OPT_OUT_PHRASE
    from stack.facts import DEFAULT_PORTS

    bucket = folder / "bucket"
    bucket.mkdir(exist_ok=True)
    env = {
        "REQUIRED_GPUS": "0",
        "WEIGHT_TRANSFER": "mock",
        "BUCKET_DIR": str(bucket),
        "BUCKET_NOT_A_MOUNT_OK": OPT_OUT_PHRASE,
        "HF_HOME": str(bucket / "hf-home"),
        "SANDBOX": "e2b",
        "E2B_API_KEY": "e2b_test",
        "TUNNEL_PROVIDER": "cloudflared",
        "COMPOSE_PROFILES": "cloudflared",
        "TRIALS_DIR": str(folder / "trials"),
        "TRIALS_MAX_GB": "1",
    }
    env.update(zip(DEFAULT_PORTS, map(str, ports), strict=True))
    return env


def _hold(port: int, stack: ExitStack) -> None:
    sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
    sock.bind(("127.0.0.1", port))
    sock.listen()


def preflight(case: Case | None, folder: Path) -> tuple[dict[str, str], list]:
    """(the environment, preflight's failures) for `case` (None: the valid environment alone)."""
    from support import free_ports

    from guards import ports
    from guards.checks import Probes, run_all

    env = base_env(folder, free_ports(4))
    probes = Probes(
        # Test doubles for what a unit test cannot ask: the model's size (the Hub), and the Docker daemon's word
        # on who holds a port. That word here: this stack's project is known and none of its services runs, so
        # a held port is a stranger's, as when another program holds it on a real host.
        model_size=lambda model, hf_home: None,
        port_owner=lambda: ports.Owners("asyncgrpo-harbor", set()),
        docker_socket=str(folder / "no-docker.sock"),
    )
    with ExitStack() as stack:
        if case is not None:
            env.update(case.also)
            if case.held:
                for name in (case.setting, *case.held):
                    _hold(int(env[name]), stack)
            else:
                env[case.setting] = case.value
        return env, run_all(env, probes, phase="preflight")


def expected(case: Case, env: Mapping[str, str]) -> str:
    return re.sub(r"\{([A-Z][A-Z0-9_]*)\}", lambda m: env[m.group(1)], case.line)


def first_name(line: str) -> str:
    """The first variable a line names: the operator's, where the line is about one setting."""
    return re.search(r"\b[A-Z][A-Z0-9_]{2,}\b", line).group(0)


def test_the_environment_alone_passes(tmp_path):
    assert preflight(None, tmp_path)[1] == []


def _id(case: Case) -> str:
    return f"{case.setting}={(case.value or 'held').strip()[:24]!r}"


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_one_line_naming_the_variable_the_value_and_the_fix(tmp_path, case):
    env, failures = preflight(case, tmp_path)
    mine = [f for f in failures if first_name(f.message) == case.setting]
    assert len(mine) == 1, failures
    (failure,) = mine
    line = failure.message
    assert failure.check == case.check
    # Nothing else is reported but what the case broke on purpose, each on a line of its own (two held ports were
    # one line joined with "; ").
    assert sorted(first_name(f.message) for f in failures) == sorted((case.setting, *case.held)), failures
    assert "\n" not in line
    want = expected(case, env)
    if ANY in want:
        head, tail = want.split(ANY)
        assert line.startswith(head) and line.endswith(tail), line
    else:
        assert line == want
    # The value, printable: a value with a line break is shown quoted, its break escaped.
    value = env[case.setting].strip()
    value = repr(value) if "\n" in value else value
    assert value in line
    assert FIX.search(line.split(value, 1)[1]), line  # after the value: the fix
    if case.inner:
        assert case.inner not in line


def test_two_bad_env_server_settings_are_two_lines(tmp_path):
    """env-server's reader raised at the first of a wildcard CAPTURE_HOST and a plain-http DIRECT_URL for E2B
    sandboxes, so preflight printed that one and hid the other until it was fixed and preflight ran again."""
    (wildcard,) = (c for c in CASES if (c.setting, c.value) == ("CAPTURE_HOST", "0.0.0.0"))
    (plain,) = (c for c in CASES if c.setting == "DIRECT_URL" and c.value.startswith("http://"))
    both = Case(wildcard.setting, wildcard.value, "", wildcard.check, also={**plain.also, plain.setting: plain.value})
    env, failures = preflight(both, tmp_path)
    assert [(f.check, f.message) for f in failures] == [
        (wildcard.check, expected(wildcard, env)),
        (plain.check, expected(plain, env)),
    ]


def test_env_server_refuses_max_output_tokens_0_too():
    """Issue 29: env-server alone accepted MAX_OUTPUT_TOKENS=0 (preflight prints the line once, from the trainer's
    reader; env-server starts on its own reader, which must refuse it as well)."""
    from stack.env import EnvError
    from stack.readers.env_server import Settings

    with pytest.raises(EnvError) as refused:
        Settings.from_env({"MAX_OUTPUT_TOKENS": "0"})
    assert refused.value.problems == [CASES[[c.setting for c in CASES].index("MAX_OUTPUT_TOKENS")].line]


def table() -> str:
    """The issue's table, from preflight's real output for each case."""
    rows = ["| setting | value | the line preflight prints |", "|---|---|---|"]
    for case in CASES:
        with tempfile.TemporaryDirectory() as folder:
            env, failures = preflight(case, Path(folder))
        said = [str(f) for f in failures if first_name(f.message) == case.setting] or ["(accepted in silence)"]
        value = case.shown or (repr(case.value) if "\n" in case.value else case.value)
        for line in said:
            cells = (case.setting, f"`{value}`" if not case.shown else value, line)
            rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(rows)


if __name__ == "__main__":
    # pyproject's pytest config puts these on the path for the suites; run as a script, this does.
    ROOT = Path(__file__).resolve().parents[2]
    sys.path[:0] = [str(ROOT / "services"), str(ROOT / "tests")]
    print(table())
