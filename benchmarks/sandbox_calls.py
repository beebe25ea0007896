"""What a docker sandbox's `exec` costs the host: Harbor's `docker compose exec` vs `docker exec` (env_server/
sandbox_calls.py), side by side on one sandbox.

    docker run --rm -v /var/run/docker.sock:/var/run/docker.sock -v "$PWD:/src:ro" -e PYTHONPATH=/src/services \
        asyncgrpo-harbor/env-server:local python /src/benchmarks/sandbox_calls.py [--calls N] [--rounds R]

It starts one sandbox of the starter task `count-lines` with Harbor 0.25.0's own DockerEnvironment (the compose
files, variables and flags a rollout's sandbox gets; Harbor builds the task's image if this host has none yet),
then runs `exec("true")` N times through compose and N times through docker, alternating R rounds so that drift
on the host falls on both. CPU is the whole host's busy time from /proc/stat (a container reads the host's):
the CLI process, dockerd, containerd, the shim and runc all count, which is what a rollout pays on 2 cores. Run
it on a quiet host; it prints CPU-s and wall seconds a call for each way, and their ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STARTER = ROOT / "datasets" / "starter" / "count-lines"


def busy_s() -> float:
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


async def measure(env, calls: int) -> tuple[float, float]:
    """CPU-s and wall seconds a call, for `calls` execs of `true` in the sandbox."""
    c0, t0 = busy_s(), time.monotonic()
    for _ in range(calls):
        result = await env.exec("true")
        assert result.return_code == 0, result
    return (busy_s() - c0) / calls, (time.monotonic() - t0) / calls


async def main(calls: int, rounds: int) -> None:
    from harbor.environments.docker.docker import DockerEnvironment

    from env_server import prebuild, sandbox_calls

    [target] = prebuild.targets([STARTER])
    env = prebuild._environment(
        target.environment_dir, "count-lines", f"bench-calls-{secrets.token_hex(4)}__env", target.env_config
    )
    original = DockerEnvironment._run_docker_compose_command
    sandbox_calls.install()
    through_docker = DockerEnvironment._run_docker_compose_command
    rows: dict[str, list[tuple[float, float]]] = {"docker compose exec": [], "docker exec": []}
    await env.start(force_build=False)
    try:
        for _ in range(rounds):
            for name, method in (("docker compose exec", original), ("docker exec", through_docker)):
                DockerEnvironment._run_docker_compose_command = method
                rows[name].append(await measure(env, calls))
    finally:
        DockerEnvironment._run_docker_compose_command = original
        await env.stop(delete=True)  # its image too: nothing of the benchmark stays
    print(f"{rounds} rounds x {calls} calls of exec('true') each way, on {os.cpu_count()} cores (medians of rounds):")
    cpu = {}
    for name, samples in rows.items():
        cpu[name] = statistics.median(c for c, _ in samples)
        wall = statistics.median(w for _, w in samples)
        print(f"  {name:22} {cpu[name]:.3f} CPU-s a call, {wall:.3f} s wall")
    print(f"  ratio: docker exec costs {cpu['docker exec'] / cpu['docker compose exec']:.2f} of compose exec's CPU")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    sys.exit(asyncio.run(main(args.calls, args.rounds)))
