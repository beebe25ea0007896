"""Allowed values and defaults that more than one service (or compose, or preflight) relies on.

A value allowed here is allowed everywhere: preflight refuses exactly what the service would refuse
at start, so a run never gets past the cheap check and dies at the expensive one.
"""

from __future__ import annotations

# Sandbox backends and tunnel providers: stack/backends.py (what each needs). Modal is a Harbor backend
# too, but nothing here checks its credentials or reaps its sandboxes, so it is not offered.

# How the trainer pushes weights into the engine: stack/backends.py (WEIGHT_TRANSFERS).

# How mini-swe-agent gets into a sandbox (env_server.agent_install).
AGENT_INSTALLS = ("online", "preinstalled", "wheelhouse")

# mini-swe-agent 2.4.6's one tool (minisweagent/models/utils/actions_toolcall.py), as the agent sends it with every
# model call: the engine's chain check (stack/serving/chain.py) and the mock engine (mock_engine/agent_turns.py) render it.
MINI_SWE_AGENT_BASH_TOOL = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Execute a bash command",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string", "description": "The bash command to execute"}},
            "required": ["command"],
        },
    },
}

# Model calls per rollout. Always on: a chained rollout's packed length, and so the trainer's memory,
# grows with its turns (docs/GPU-BENCHMARK.md).
DEFAULT_STEP_LIMIT = 12

# Loopback ports on the host network, one per listening service.
DEFAULT_PORTS = {"ENGINE_PORT": 8001, "ENV_SERVER_PORT": 8000, "CAPTURE_PORT": 8100, "TUNNEL_METRICS_PORT": 20241}
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
# Docker's default bridge gateway: local docker sandboxes reach the host here, and nothing beyond this host can.
SANDBOX_BRIDGE_HOST = "172.17.0.1"
# The words an operator must write to bind the capture proxy beyond loopback and the bridge behind a tunnel.
CAPTURE_HOST_OPT_OUT_PHRASE = "publish-the-capture-proxy-beyond-the-tunnel"

# The tunnel hand-off: a named volume mounted here in tunnel-check (read-write) and env-server (read-only).
HANDOFF_DIR = "/handoff"
HANDOFF_FILE = "capture_url.json"
HANDOFF_VOLUME = "handoff"  # compose's volume name; Docker prefixes it with the project name

BUCKET_DIR = "/bucket"
DEFAULT_DATASET = "/app/datasets/starter"
# The words an operator must write to train into a folder that is not a real mount.
BUCKET_OPT_OUT_PHRASE = "i-accept-losing-checkpoints"
