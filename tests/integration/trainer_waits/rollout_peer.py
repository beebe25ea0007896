"""An env server as the trainer meets it, minus the sandboxes: OpenEnv 0.10.0's own Task API + MCP app
(`create_app` around `HarborEnvironment`, as env-server's server.build_app builds it) whose `_run_rollout`
is replaced, the way env-server's GatedHarborEnvironment replaces it, by one of two behaviours:

    python rollout_peer.py PORT hang   MARKER   every rollout writes MARKER and then never ends (the test
                                                kills this process mid-rollout, as the fault suite kills
                                                env-server during the warm-up)
    python rollout_peer.py PORT answer          every rollout returns a scored result at once

Harbor (sandboxes, agents) is the one part left out: the trainer sees only this server's wire protocol.
"""

import asyncio
import sys
from pathlib import Path

import uvicorn
from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation
from openenv.harbor.environment import HarborEnvironment
from openenv.harbor.models import HarborRolloutResult, HarborState, HarborTurn

ANSWER = HarborRolloutResult(
    ok=True,
    reward=1.0,
    task_name="count-lines",
    trial_name="peer-count-lines-0001",
    rollout_type="train",
    capture_level="tokens",
    turns=[
        HarborTurn(
            turn=0,
            prompt_token_ids=[1, 2, 3],
            completion_token_ids=[5, 6],
            per_token_logps=[-0.1, -0.2],
            loss_mask=[0, 0, 0, 1, 1],
            node_id="n0",
            sampling_params={"temperature": 1.0},
        )
    ],
)


class PeerEnvironment(HarborEnvironment):
    mode = "answer"
    marker = ""

    async def _run_rollout(self, *args, **kwargs) -> str:  # type: ignore[override]
        if self.mode == "hang":
            Path(self.marker).write_text("started")
            await asyncio.sleep(3600)
        return ANSWER.model_dump_json()


if __name__ == "__main__":
    port, mode = int(sys.argv[1]), sys.argv[2]
    PeerEnvironment.mode = mode
    PeerEnvironment.marker = sys.argv[3] if len(sys.argv) > 3 else ""
    PeerEnvironment.configure(datasets=[])
    app = create_app(PeerEnvironment, CallToolAction, CallToolObservation, state_cls=HarborState, env_name="harbor_env")
    print("serving", flush=True)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
