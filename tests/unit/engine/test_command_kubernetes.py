"""The engine's bind under DEPLOYMENT=kubernetes: the pod's address (NetworkPolicies keep it in);
under compose, loopback only, as before."""

import pytest

from engine.command import EnvError, build_command


def flag_value(argv, flag):
    return argv[argv.index(flag) + 1]


def test_kubernetes_binds_the_pods_address():
    # The chart passes the pod's IP (status.podIP).
    argv = build_command(
        {"MODEL": "m", "TOOL_CALL_PARSER": "hermes", "DEPLOYMENT": "kubernetes", "ENGINE_HOST": "10.244.1.7"}
    )
    assert flag_value(argv, "--host") == "10.244.1.7"


@pytest.mark.parametrize("deployment", ["", "compose"])
def test_compose_still_refuses_a_wide_bind(deployment):
    with pytest.raises(EnvError, match="must bind 127.0.0.1"):
        build_command({"MODEL": "m", "TOOL_CALL_PARSER": "hermes", "DEPLOYMENT": deployment, "ENGINE_HOST": "0.0.0.0"})


def test_an_unknown_deployment_is_refused_in_one_line():
    with pytest.raises(EnvError, match=r"^DEPLOYMENT='swarm' is not allowed: use compose"):
        build_command({"MODEL": "m", "TOOL_CALL_PARSER": "hermes", "DEPLOYMENT": "swarm"})


def test_extra_args_still_cannot_rebind_on_kubernetes():
    env = {
        "MODEL": "m",
        "TOOL_CALL_PARSER": "hermes",
        "DEPLOYMENT": "kubernetes",
        "ENGINE_EXTRA_ARGS": "--host 10.0.0.1",
    }
    with pytest.raises(EnvError, match="remove --host from ENGINE_EXTRA_ARGS"):
        build_command(env)
