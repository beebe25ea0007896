"""Issue 29's settings that used to pass preflight in silence: each now gets ONE line at preflight, naming the
variable, the value and the fix, from the reader of the service that owns it (host venv, no Docker)."""

import socket

import pytest
from test_checks import GCSFUSE, good_env, probes_for

from guards import ports
from guards.checks import run_all
from stack.facts import CAPTURE_HOST_OPT_OUT_PHRASE
from stack.readers.stop_rules import RULES


def lines(tmp_path, **over):
    env = good_env(tmp_path, **over)
    # weight-transfer depends on the image (vllm / mock_engine); it has its own tests.
    return [(f.check, f.message) for f in run_all(env, probes_for(tmp_path, GCSFUSE)) if f.check != "weight-transfer"]


DIRECT = {"TUNNEL_PROVIDER": "direct", "COMPOSE_PROFILES": ""}

CASES = [
    (
        {"MODEL": "Qwen/Qwen3-1.7B\nx"},
        "trainer-settings",
        "MODEL='Qwen/Qwen3-1.7B\\nx' contains a control character ('\\n' at character 16): set MODEL to one line "
        "of printable text",
    ),
    (
        {"STACK_NAME": "grpo\tnight"},
        "env-server-settings",
        "STACK_NAME='grpo\\tnight' contains a control character ('\\t' at character 5): set STACK_NAME to one line "
        "of printable text",
    ),
    (
        # A secret's value is never printed, only its length.
        {"E2B_API_KEY": "e2b_abc\ndef"},
        "sandbox",
        "E2B_API_KEY=<secret, 11 characters> contains a control character ('\\n' at character 8): set E2B_API_KEY "
        "to one line of printable text",
    ),
    (
        {"HUB_TOKEN": "hf_x\ry"},
        "trainer-settings",
        "HUB_TOKEN=<secret, 6 characters> contains a control character ('\\r' at character 5): set HUB_TOKEN to "
        "one line of printable text",
    ),
    (
        {**DIRECT, "DIRECT_URL": "https://capture.example.com\nx"},
        "env-server-settings",
        "DIRECT_URL='https://capture.example.com\\nx' contains a control character ('\\n' at character 28): set "
        "DIRECT_URL to one line of printable text",
    ),
    (
        {**DIRECT, "DIRECT_URL": "https://capture.exa mple.com"},
        "tunnel-settings",
        "DIRECT_URL='https://capture.exa mple.com' is not a usable URL ('exa mple' is not a valid hostname label): "
        "e.g. http://172.17.0.1:8100",
    ),
    (
        {"LEARNING_RATE": "1e9"},
        "trainer-settings",
        "LEARNING_RATE='1e9' is above 0.01: set it in (0, 0.01], e.g. 1e-6 (RL fine-tuning runs at 1e-7..1e-5; "
        "AdamW moves every weight by about this much per step, so 0.01 and up wrecks a pretrained model) "
        "(default 1e-06)",
    ),
    (
        {"STOP_WINDOW_STEPS": "1000000000"},
        "stop-rules",
        "STOP_WINDOW_STEPS=1000000000 is longer than the run (MAX_STEPS=200), so the window never fills and no stop "
        "rule can fire: set STOP_WINDOW_STEPS to at most 200 (default 5), or turn the rules off "
        f"({' '.join(f'{rule.name}=off' for rule in RULES)})",
    ),
    (
        {"CAPTURE_MAX_BODY_MB": "100000"},
        "env-server-settings",
        "CAPTURE_MAX_BODY_MB='100000' is above 64: set it in 1-64 (a full 32k-token context is ~150 KB of JSON; "
        "each request's body is held in memory) (default 8)",
    ),
    (
        {"CAPTURE_MAX_CONCURRENT": "5000"},
        "env-server-settings",
        "CAPTURE_MAX_CONCURRENT='5000' is above 1024: set it in 1-1024 (one call per in-flight rollout is enough: "
        "MAX_INFLIGHT_ROLLOUTS) (default 64)",
    ),
    (
        {"CAPTURE_HOST": "10.0.0.5"},
        "env-server-settings",
        "CAPTURE_HOST='10.0.0.5' with TUNNEL_PROVIDER=cloudflared would serve the capture proxy on that address as "
        "well as through the tunnel: set CAPTURE_HOST=127.0.0.1 (or 172.17.0.1, the Docker bridge), or, to publish "
        f"it there on purpose, CAPTURE_HOST_BEYOND_TUNNEL_OK={CAPTURE_HOST_OPT_OUT_PHRASE}",
    ),
    (
        # Reported under the operator's name (the container's was MAX_COMPLETION_TOKENS), and env-server too
        # reads it through the same field, so 0 is refused everywhere.
        {"MAX_OUTPUT_TOKENS": "0"},
        "trainer-settings",
        "MAX_OUTPUT_TOKENS='0' is below 1: set MAX_OUTPUT_TOKENS to at least 1 (default 4096)",
    ),
    (
        {"MAX_OUTPUT_TOKENS": "32768"},
        "trainer-settings",
        "MAX_OUTPUT_TOKENS=32768 leaves no room for a prompt in ENGINE_MAX_MODEL_LEN=32768: set MAX_OUTPUT_TOKENS "
        "well below it (default 4096), or raise ENGINE_MAX_MODEL_LEN",
    ),
    (
        {"TUNNEL_CHECK_TIMEOUT_S": "20"},
        "tunnel-settings",
        "TUNNEL_CHECK_TIMEOUT_S=20 must be below TUNNEL_CHECK_INTERVAL_S=10: checks run on a fixed schedule and "
        "one must end before the next starts, or the withdraw bound no longer holds",
    ),
]


@pytest.mark.parametrize(("over", "check", "line"), CASES, ids=[next(iter(c[0])) for c in CASES])
def test_each_bad_setting_is_one_line_at_preflight(tmp_path, over, check, line):
    assert lines(tmp_path, **over) == [(check, line)]


@pytest.mark.parametrize(
    "over",
    [
        {"CAPTURE_HOST": "172.17.0.1"},  # the Docker bridge: only local sandboxes reach it
        {"CAPTURE_HOST": "::1"},
        {"CAPTURE_HOST": "10.0.0.5", "CAPTURE_HOST_BEYOND_TUNNEL_OK": CAPTURE_HOST_OPT_OUT_PHRASE},
        # direct: the address the sandboxes route to is the point
        {**DIRECT, "CAPTURE_HOST": "10.0.0.5", "DIRECT_URL": "https://capture.example.com"},
        {"STOP_WINDOW_STEPS": "200"},  # a window that fills at the last step
        # The default window (5) outlasts a 2-step run (the CPU form): the rules are not armed, not refused.
        {"MAX_STEPS": "2"},
        {"STOP_WINDOW_STEPS": "1000000000"} | {rule.name: "off" for rule in RULES},
        {"LEARNING_RATE": "0.01", "CAPTURE_MAX_BODY_MB": "64", "CAPTURE_MAX_CONCURRENT": "1024"},
        # Whitespace around a value is stripped as before (a CRLF .env's trailing \r included).
        {"MODEL": "Qwen/Qwen3-1.7B\r\n"},
    ],
)
def test_the_values_at_the_edges_pass(tmp_path, over):
    assert lines(tmp_path, **over) == []


def test_ports_held_by_strangers_are_one_line_each(tmp_path):
    env = good_env(tmp_path)
    probes = probes_for(tmp_path, GCSFUSE)
    probes.port_owner = lambda: ports.Owners("asyncgrpo-harbor", set())
    held = []
    try:
        for name in ("ENGINE_PORT", "CAPTURE_PORT"):
            sock = socket.socket()
            sock.bind(("127.0.0.1", int(env[name])))
            sock.listen()
            held.append(sock)
        found = [f.message for f in run_all(env, probes) if f.check == "ports"]
    finally:
        for sock in held:
            sock.close()
    assert found == [
        f"port {env[name]} ({name}) is already in use on this host by something other than this stack's {service}: "
        f"stop what holds it (`ss -ltnp 'sport = :{env[name]}'`) or set {name} to a free port"
        for name, service in (("ENGINE_PORT", "engine"), ("CAPTURE_PORT", "env-server"))
    ]


def test_every_bad_tunnel_check_setting_is_its_own_line(tmp_path):
    """tunnel-check's reader no longer stops at its first bad value: preflight lists all of them."""
    found = lines(
        tmp_path,
        TUNNEL_CHECK_INTERVAL_S="5",
        TUNNEL_CHECK_TIMEOUT_S="5",
        TUNNEL_CHECK_FAILURES_TO_WITHDRAW="many",
        TUNNEL_HOSTNAME="capture_.example.com",
    )
    assert found == [
        (
            "tunnel-settings",
            "TUNNEL_HOSTNAME='capture_.example.com' is not a hostname ('capture_' is not a valid hostname label): "
            "e.g. capture.example.com",
        ),
        (
            "tunnel-settings",
            "TUNNEL_CHECK_FAILURES_TO_WITHDRAW='many' is not a whole number: set TUNNEL_CHECK_FAILURES_TO_WITHDRAW to "
            "an integer (default 2)",
        ),
        (
            "tunnel-settings",
            "TUNNEL_CHECK_TIMEOUT_S=5 must be below TUNNEL_CHECK_INTERVAL_S=5: checks run on a fixed schedule and one "
            "must end before the next starts, or the withdraw bound no longer holds",
        ),
    ]
