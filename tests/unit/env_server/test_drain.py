"""SIGTERM's drain: running rollouts are cancelled and waited for, so Harbor's shielded sandbox stop
completes before the process exits. The rollout here is a coroutine shaped like Harbor's Trial.run
(catch the cancel, `await asyncio.shield(environment.stop())`, re-raise): Harbor itself is not on the
host; tests/integration/env_server stops a real docker sandbox this way."""

import asyncio

from env_server.rollouts import Inflight


def test_drain_cancels_rollouts_and_waits_for_their_sandboxes_to_stop():
    stopped: list[str] = []

    async def trial(inflight: Inflight, name: str, started: asyncio.Event):
        with inflight.track(name):
            try:
                started.set()
                await asyncio.Event().wait()  # the agent phase, forever
            except asyncio.CancelledError:

                async def stop():
                    await asyncio.sleep(0.05)  # a `docker compose down` that takes a moment
                    stopped.append(name)

                await asyncio.shield(stop())
                raise

    async def scenario():
        inflight = Inflight()
        events = [asyncio.Event(), asyncio.Event()]
        tasks = [asyncio.create_task(trial(inflight, f"r{i}", e)) for i, e in enumerate(events)]
        for e in events:
            await e.wait()
        assert len(inflight) == 2
        cancelled, left = await inflight.drain(grace_s=10)
        assert all(t.cancelled() for t in tasks)
        return inflight, cancelled, left

    inflight, cancelled, left = asyncio.run(scenario())
    assert (cancelled, left) == (2, [])
    assert sorted(stopped) == ["r0", "r1"]
    assert inflight.draining and len(inflight) == 0


def test_drain_reports_what_outlived_the_grace():
    async def scenario():
        inflight = Inflight()
        started = asyncio.Event()

        async def stubborn():
            with inflight.track("slow#0"):
                started.set()
                try:
                    await asyncio.Event().wait()
                except asyncio.CancelledError:
                    await asyncio.shield(asyncio.sleep(5))
                    raise

        task = asyncio.create_task(stubborn())
        await started.wait()
        result = await inflight.drain(grace_s=0.1)
        task.cancel()
        return result

    assert asyncio.run(scenario()) == (1, ["slow#0"])


def test_a_draining_server_refuses_new_rollouts_with_one_line(monkeypatch, tmp_path):
    import json

    import openenv.harbor.rollout as rollout_module

    from env_server.rollouts import GatedHarborEnvironment

    started: list[dict] = []

    async def run_rollout(**kwargs):  # OpenEnv's rollout: must never be reached
        started.append(kwargs)

    monkeypatch.setattr(rollout_module, "run_rollout", run_rollout)
    inflight = Inflight()
    monkeypatch.setattr(GatedHarborEnvironment, "inflight", inflight)
    monkeypatch.setattr(GatedHarborEnvironment, "sandbox_backend", "docker")
    monkeypatch.setattr(GatedHarborEnvironment, "handoff_dir", str(tmp_path))
    assert asyncio.run(inflight.drain(grace_s=1)) == (0, [])

    env = GatedHarborEnvironment()
    result = json.loads(
        asyncio.run(
            env._run_rollout(
                split="starter",
                task_index=0,
                harness="mini-swe-agent",
                sandbox="docker",
                reward_key="",
                keep_sandbox=False,
                force_build=False,
            )
        )
    )
    assert (result["ok"], result["error"], result["reward"]) == (
        False,
        "env-server is shutting down: rollout not started",
        None,
    )
    assert started == [] and len(inflight) == 0
