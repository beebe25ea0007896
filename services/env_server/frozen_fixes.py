"""No "parameter fixes" learned from live traffic: the engine leg is what the startup probe measured.

OpenEnv 0.10.0's `InferenceClient._post` (openenv/core/harness/capture/upstream.py) answers a 400 from
the engine by asking `compat.diagnose` for a fix (drop, rename or set a parameter), applies it to the
failed request, retries, and APPENDS it to `self.param_fixes`, which every later request of every
session on that engine then carries. It exists for hosted providers that reject parameters per model.
vLLM's 400 messages echo the input, so code in a sandbox can craft a request whose 400 reads
"Unsupported parameter: 'temperature' ..."; from then on every call goes out without the run's
temperature, OpenEnv sees the submitted policy differ from the session's, and every later turn of
every rollout is `[FATAL] sampling_policy_changed`: the run trains on nothing.

The engine here is the one vLLM the stack launched and probed at startup, so there is nothing to learn
later. `FrozenInferenceClient._post` applies the fixes the client already holds and never adds one: a
request the engine rejects is that request's 400, returned to the agent that sent it.

The capture module builds every client through its module-global name `InferenceClient` (the default
client in `create_app`, each per-engine client in `UpstreamPool._resolve_once`), so `freeze()` rebinds
that name before the capture app is created.
"""

from __future__ import annotations

from typing import Any

from openenv.core.harness.capture import server as capture_server
from openenv.core.harness.capture.upstream import InferenceClient


class FrozenInferenceClient(InferenceClient):
    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        for fix in self.param_fixes:
            fix.apply(body)
        return await self._post_with_retries(path, body)


def freeze() -> None:
    """Make every capture client built from now on a frozen one (idempotent)."""
    capture_server.InferenceClient = FrozenInferenceClient
