"""Docker sandboxes stop at once, not after Docker's 10 s grace period (SANDBOX=docker).

Harbor 0.25's docker environment runs a task's `main` service as `sh -c "sleep infinity"`
(harbor/environments/docker/docker-compose-build.yaml and docker-compose-prebuilt.yaml). That shell is
the container's PID 1, and PID 1 ignores SIGTERM unless it installs a handler, so every sandbox's
`docker compose down` waited out the 10 s stop timeout before Docker killed it. Measured here: `docker
stop` of such a container 10.1 s; with `--stop-signal SIGKILL` 0.1 s. A rollout holds its slot until its
sandbox is down, so every rollout took 10 s longer, and the CPU form's first step waited for three in a
row (the warm-up, then two waves of the first group).

Nothing in a sandbox needs a graceful stop by then: the verifier has run and the artifacts are
collected. So `main` gets `stop_signal: SIGKILL` from one more compose file, placed right after
Harbor's build/prebuilt file, so a task's own docker-compose.yaml (which comes later) can still set its
own. SIGKILL rather than `init: true`: an init needs docker-init on the daemon's host, SIGKILL nothing.

The same file sets `main`'s `pull_policy: missing`. Harbor's build file says `pull_policy: build`, under which
`docker compose up` builds the image again right after Harbor's own `build` in `DockerEnvironment.start` (seen
here: `up` printed a whole cached BuildKit run; a cached `compose build` measured 0.6-0.9 CPU-s, once more
per trial). `missing` starts the image that `build` has just tagged, and still builds one that is not there.
"""

from __future__ import annotations

from pathlib import Path

OVERRIDE = Path(__file__).with_name("sandbox-stop.compose.yaml")


def with_quick_stop(paths: list[Path], harbor_base: tuple[Path, ...]) -> list[Path]:
    """The compose files with OVERRIDE after Harbor's base file; unchanged when no base file is there
    (a layout this was not written for is left as Harbor made it)."""
    for i, path in enumerate(paths):
        if path in harbor_base:
            return [*paths[: i + 1], OVERRIDE, *paths[i + 1 :]]
    return list(paths)


def install() -> str:
    """Wrap Harbor 0.25's `DockerEnvironment._docker_compose_paths` (read at that version: every compose
    command, up/exec/down/build, takes its -f files from it). Returns the startup report's line."""
    from harbor.environments.docker.docker import DockerEnvironment

    prop = DockerEnvironment.__dict__["_docker_compose_paths"]
    original = getattr(prop.fget, "__wrapped__", prop.fget)

    def paths(self) -> list[Path]:
        base = (self._DOCKER_COMPOSE_BUILD_PATH, self._DOCKER_COMPOSE_PREBUILT_PATH)
        return with_quick_stop(original(self), base)

    paths.__wrapped__ = original  # type: ignore[attr-defined]
    DockerEnvironment._docker_compose_paths = property(paths)
    return (
        "sandbox   docker sandboxes stop with SIGKILL (their `sleep infinity` PID 1 ignores SIGTERM: 10 s each), "
        "and `up` does not build again what Harbor's `build` just built"
    )
