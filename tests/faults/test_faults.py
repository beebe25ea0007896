"""The fault suite: the CPU form under `docker compose`, hurt the way a night of training hurts it, asserting
with figures that it heals or says why, and that no training step is lost that need not be.

One stack for the whole suite (its own compose project and ports, only its own containers), driven by the
smoke test's driver (tests/smoke/compose_stack.py). The tests run in order on that one stack and one run:

    up -> step 1 -> tunnel-check crash healed by compose; `docker kill` of it healed by `up -d`
         -> env-server `docker kill` + `docker compose up -d env-server` (preflight re-runs with the
            rest of the stack up; the trainer waits meanwhile and says why)
         -> the trainer stopped and started again, env-server `docker kill`ed during its warm-up rollout: the same
            trainer process waits and says why, the warm-up runs again once `up -d env-server` is healthy, and
            training resumes at the step after the saved one (0 lost). That stop is the suite's SIGTERM case:
            checkpoint, "stopped", resumed at the next step (it was a case of its own, one trainer restart more;
            the learning gate stops and resumes a run that learns too)
         -> `kill -9` of the trainer: at most SAVE_STEPS lost -> retention keeps SAVE_TOTAL_LIMIT
         -> the public capture port (junk, floods, a poisoned request from a sandbox; the run trains on)
         -> the engine killed during a step, then during a weight push: each time the trainer exits 4 with the
            step saved and one line, and `up -d engine` + `up -d trainer` resume it at the next step

Real here: Docker Compose, every image, OpenEnv's capture proxy, Harbor docker sandboxes, tunnel-check,
TRL's trainer. Stand-ins as in the smoke test (mock engine, tunnel stand-in, a folder for the bucket).
Waits are on observable state, never sleeps; each test prints its figures.
"""

from __future__ import annotations

import json
import re
import secrets
import time
from collections import Counter

import pytest
from compose_stack import (  # noqa: F401 -- diagnose_on_failure: the autouse fixture, registered here
    Stack,
    clean_env,
    diagnose_on_failure,
    prepare_run,
    run,
    steps_logged,
    trainer_log,
    wait_for_step,
)
from compose_stack import run_status as status

PROJECT = "asyncgrpo-faults"
# Its own ports, away from the smoke test's and the defaults, so it can run next to either.
PORTS = {"ENGINE_PORT": 18801, "ENV_SERVER_PORT": 18800, "CAPTURE_PORT": 18900, "TUNNEL_METRICS_PORT": 18941}
SAVE_STEPS = 3
SAVE_TOTAL_LIMIT = 2
UP_TIMEOUT_S = 30 * 60
STEP_TIMEOUT_S = 15 * 60


@pytest.fixture(scope="module")
def stack():
    run_name = f"faults-{secrets.token_hex(3)}"
    values = {
        **{k: str(v) for k, v in PORTS.items()},
        # More steps than the suite will train: it stops the run itself.
        "CPU_MAX_STEPS": "50",
        "CPU_SAVE_STEPS": str(SAVE_STEPS),
        "CPU_SAVE_TOTAL_LIMIT": str(SAVE_TOTAL_LIMIT),
        "RUN_NAME": run_name,
        # A short withdraw bound, so the healing figures are about the stack, not the defaults.
        "TUNNEL_CHECK_INTERVAL_S": "3",
        "TUNNEL_CHECK_TIMEOUT_S": "2",
        # The suite's run is long (it stops it itself) and its scripted groups are often all correct: the
        # zero-spread rule then ends it by chance (CI once saw it stop at step 9, before the engine cases), and under
        # the CPU form's scripted replays the mismatch KL reads 0.25-16.5 nats (off there by default anyway). Those rules
        # have suites of their own (tests/integration/trainer); here they would only race the faults.
        "STOP_ZERO_SPREAD_FRAC": "off",
        "CPU_STOP_MISMATCH_KL": "off",
    }
    bucket, trials, env_file = prepare_run("faults", PROJECT, values)
    s = Stack(env_file=env_file, env=clean_env(), project=PROJECT)
    s.bucket, s.trials, s.run_dir = bucket, trials, bucket / "checkpoints" / run_name
    s.figures = {}
    s.saves = set()  # every checkpoint step seen complete in this run
    try:
        with s.session():
            yield s
    finally:
        # Sandboxes a killed env server left behind (until it reaps them itself at start), and their networks.
        orphans = sandboxes(s)
        if orphans:
            run(["docker", "rm", "-f", *orphans], check=False)
        nets = run(["docker", "network", "ls", "-q", "--filter", f"name={PROJECT}--"], check=False).stdout.split()
        if nets:
            run(["docker", "network", "rm", *nets], check=False)
        print("\nfaults: " + "; ".join(f"{k} {v}" for k, v in s.figures.items()))
        print(f"faults: suite wall time {time.time() - s.t_up:.0f} s")


# --- what the stack says ---------------------------------------------------------------------------------
def checkpoints(stack) -> list[int]:
    """Complete checkpoints (trainer_state.json is written last), by step."""
    return sorted(
        int(p.name.split("-")[1]) for p in stack.run_dir.glob("checkpoint-*") if (p / "trainer_state.json").is_file()
    )


def handoff(stack) -> dict:
    out = stack.compose("exec", "-T", "tunnel-check", "cat", "/handoff/capture_url.json", check=False)
    try:
        return json.loads(out.stdout)
    except ValueError:
        return {}


def sandboxes(stack) -> set[str]:
    """Running Harbor sandboxes of this stack: the env server names each sandbox's compose project
    `<stack>--<task>-<hex8>__env` (services/env_server/sandboxes.py), so Docker's own project label says
    whose it is."""
    out = run(["docker", "ps", "--format", '{{.ID}} {{.Label "com.docker.compose.project"}}'], check=False).stdout
    return {
        cid
        for cid, _, project in (line.partition(" ") for line in out.splitlines())
        if project.startswith(PROJECT + "--")
    }


def published_lines(stack) -> int:
    return stack.log("tunnel-check").count("HEALTHY: published")


# --- the suite --------------------------------------------------------------------------------------------
def test_the_stack_comes_up_and_trains(stack):
    try:
        stack.compose("up", "-d", timeout=UP_TIMEOUT_S)
        wait_for_step(stack, 1)
    except BaseException:
        print(stack.diagnostics())
        raise
    stack.figures["up -> step 1"] = f"{time.time() - stack.t_up:.0f} s"


def test_a_crashed_tunnel_check_is_restarted_by_compose_and_verifies_again(stack):
    """A crash (here: SIGKILL of its process from inside, as the kernel's OOM killer does) is healed by
    the restart policy alone, and the URL is verified again."""
    before = published_lines(stack)
    cid = stack.container("tunnel-check")["ID"]
    t0 = time.time()
    # PID 1 is the init (compose `init: true`); the monitor is its child.
    run(
        [
            "docker",
            "exec",
            cid,
            "python",
            "-c",
            "import os, signal\n"
            "for pid in os.listdir('/proc'):\n"
            "    if pid.isdigit() and int(pid) not in (1, os.getpid()):\n"
            "        if b'tunnel_check' in open(f'/proc/{pid}/cmdline', 'rb').read(): os.kill(int(pid), signal.SIGKILL)",
        ],
        check=False,
    )
    stack.wait_for("tunnel-check to publish again", lambda: published_lines(stack) > before, 180, poll_s=1)
    healed = time.time() - t0
    restarts = json.loads(run(["docker", "inspect", cid]).stdout)[0]["RestartCount"]
    assert restarts >= 1
    assert handoff(stack)["state"] == "verified"
    stack.figures["tunnel-check crash -> URL verified again"] = f"{healed:.1f} s (restarts {restarts})"


def test_docker_kill_of_tunnel_check_is_healed_by_up(stack):
    """`docker kill` is operator intent to Docker: it disables the restart policy until the next start
    (documented in docker-kill(1)), so `docker compose up -d tunnel-check` is what brings it back; that
    re-runs preflight in the running stack, which must not count the stack's own ports as taken."""
    before = published_lines(stack)
    stack.compose("kill", "tunnel-check")
    t0 = time.time()
    stack.wait_for("tunnel-check to be down", lambda: stack.state("tunnel-check")[0] == "exited", 30, poll_s=1)
    stack.compose("up", "-d", "tunnel-check", timeout=600)
    stack.wait_for("tunnel-check to publish again", lambda: published_lines(stack) > before, 180, poll_s=1)
    assert stack.state("preflight") == ("exited", 0)
    stack.figures["docker kill tunnel-check + up -d -> URL verified again"] = f"{time.time() - t0:.1f} s"


def test_env_server_killed_then_up_comes_back_and_the_trainer_waits_meanwhile(stack):
    step_before = max(steps_logged(stack))
    # Mid-rollout: at least one sandbox is running when the env server dies.
    try:
        stack.sandboxes_at_kill = stack.wait_for("a sandbox in flight", lambda: sandboxes(stack), 120, poll_s=1)
    except AssertionError:
        stack.sandboxes_at_kill = set()  # killed between rollouts; the reaping test then says so
    stack.compose("kill", "env-server")
    t0 = time.time()
    waiting = stack.wait_for(
        "the trainer to say it waits for rollouts",
        lambda: status(stack) if status(stack).get("state") == "waiting-for-rollouts" else None,
        180,
        poll_s=1,
    )
    assert "env server" in waiting["reason"], waiting
    stack.compose("up", "-d", "env-server", timeout=600)
    preflight_log = stack.compose("logs", "--no-color", "preflight", check=False).stdout
    assert stack.state("preflight") == ("exited", 0), preflight_log
    assert f"port {PORTS['ENGINE_PORT']} (ENGINE_PORT) is held by this stack's running engine" in preflight_log
    stack.wait_for("env-server healthy", lambda: stack.health("env-server") == "healthy", 300)
    back = time.time() - t0
    # Rollouts work again: the trainer, which never died, trains a further step.
    assert stack.state("trainer")[0] == "running"
    wait_for_step(stack, step_before + 1)
    stack.figures["env-server docker kill + up -d -> healthy"] = (
        f"{back:.0f} s ({len(stack.sandboxes_at_kill)} sandbox(es) in flight at the kill)"
    )
    stack.figures["trainer waiting reason"] = repr(waiting["reason"][:100])


def test_sandboxes_of_the_killed_env_server_are_gone_once_it_is_back(stack):
    """`kill -9` of the env server mid-rollout orphans its sandboxes (docker here, billing E2B ones in
    production); the env server reaps its own earlier sandboxes when it starts again."""
    assert stack.sandboxes_at_kill, "no sandbox was in flight at the kill"
    deadline = time.monotonic() + 120
    while (still := stack.sandboxes_at_kill & sandboxes(stack)) and time.monotonic() < deadline:
        time.sleep(2)
    assert not still, f"sandboxes of the killed env server still running: {sorted(still)}"
    stack.figures["env-server kill -9 mid-rollout"] = f"{len(stack.sandboxes_at_kill)} sandbox(es) in flight, 0 left"


# --- the env server killed during a restarted trainer's warm-up (issue 29) ----------------------------------------
ENV_SERVER = f"http://127.0.0.1:{PORTS['ENV_SERVER_PORT']}"  # the trainer's ENV_SERVER_URL (compose.yaml)
# The trainer prints no line of its own when the warm-up starts: train._train prints this one, then starts the warm-up
# rollout (train.warm_up, on a thread) while the main thread imports TRL and spawns the rollout child; the warm-up
# ends with WARM_UP_DONE. Between the two, the warm-up is the only rollout the trainer runs: the rollout child waits
# at its gate (trainer/rollouts/rollout_gate.py) until training starts.
TASKS_LINE = re.compile(r"^trainer-\d+\s+\|\s+(trainer: \d+ training task\(s\) of \d+ served.*)$", re.M)
WARM_UP_DONE = "trainer: warm-up rollout done: "
WAIT_LINE = re.compile(r"^trainer-\d+\s+\|\s+(trainer: rollouts refused, waiting .*)$", re.M)  # waiting.Backoff.wait
ACCEPTED = "trainer: rollouts accepted again after "  # waiting.Backoff.done
# The first waiting line once the warm-up's websocket drops with the killed server (factory.EnvServerRunner._waiting,
# the first backoff delay; the same text as tests/integration/trainer_waits, which kills a real OpenEnv server).
LOST_LINE = (
    f"trainer: rollouts refused, waiting (retry in 2s): connection to the env server {ENV_SERVER} lost during the "
    "rollout (ConnectionClosedError: no close frame received or sent); it runs again once the env server answers"
)
# From `up -d trainer` (preflight re-runs, then the trainer's imports, guards, resume and task list) to the warm-up's
# sandbox running: the suite's bound for a sandbox to appear (the poisoned-request case).
WARM_UP_IN_FLIGHT_S = 300
# From the kill to status.json saying `waiting-for-rollouts`: the websocket drops with the process, and the wait
# writes the status before its first backoff sleep; the rest is a loaded 2-core host.
WARM_UP_WAIT_SAID_S = 60
# The stopped trainer's sandboxes closed by the env server once their client is gone (env_server/client_watch.py):
# the reaping case's bound for the same teardown.
CLOSE_S = 120


def trainer_run(stack) -> tuple[str, str, int]:
    """(container id, when it last started, restart count): all three unchanged only if the trainer never exited."""
    info = json.loads(run(["docker", "inspect", stack.container("trainer")["ID"]]).stdout)[0]
    return info["Id"], info["State"]["StartedAt"], info["RestartCount"]


def test_env_server_killed_during_a_restarted_trainer_warm_up_is_waited_out_and_no_step_is_lost(stack):
    """What it proves (issue 29): a restarted trainer runs its serial warm-up rollout again before it loads the
    model, and an env server killed while that rollout is in flight no longer kills the trainer (it did, 2 of 2
    tries: exit 1, `ConnectionClosedError: no close frame received or sent`, because trainer/rollouts/factory.py caught
    neither websockets' errors nor OpenEnv's masked connect errors). The same trainer process waits, with one line
    for the lost connection and status `waiting-for-rollouts`; once `up -d env-server` is healthy the warm-up runs
    again, once, and training goes on at the step after the checkpoint the stop saved. The case above killed
    env-server mid-run only, a phase whose waits were already caught."""
    run_line = f"trainer: run {stack.run_dir.name} -> "
    t_stop = time.time()
    stack.compose("stop", "trainer", timeout=600)  # SIGTERM, then the stop_grace_period: the handler saves the step
    stopped_in = time.time() - t_stop
    assert stack.state("trainer") == ("exited", 0), trainer_log(stack)[-3000:]
    saved = checkpoints(stack)[-1]
    stack.saves.update(checkpoints(stack))
    st = status(stack)
    assert st["state"] == "stopped" and st["last_checkpoint"] == f"checkpoint-{saved}", st
    last_logged = max(steps_logged(stack))
    lost = last_logged - saved
    stack.figures["SIGTERM"] = (
        f"stopped in {stopped_in:.0f} s at step {last_logged}, checkpoint-{saved} "
        f"({'periodic' if saved % SAVE_STEPS == 0 else 'saved by the SIGTERM handler'})"
    )
    # With the stopped trainer's sandboxes closed, the next sandbox of this stack can only be the warm-up's.
    stack.wait_for("the stopped trainer's sandboxes to close", lambda: not sandboxes(stack), CLOSE_S, poll_s=2)
    log = trainer_log(stack)
    runs_before, tasks_before, done_before = log.count(run_line), len(TASKS_LINE.findall(log)), log.count(WARM_UP_DONE)
    lines_before = len(steps_logged(stack))
    t_restart = time.time()
    try:
        stack.compose("up", "-d", "trainer", timeout=600)  # re-runs preflight with the rest of the stack up
        started = trainer_run(stack)

        def warm_up_in_flight():
            # The restarted trainer printed its task line and not yet the warm-up's end, and a sandbox runs: that
            # sandbox is the warm-up rollout's, and its websocket call stays open until the sandbox is gone.
            log = trainer_log(stack)
            if log.count(WARM_UP_DONE) > done_before:
                return "done before its sandbox was seen", set(), log
            if len(TASKS_LINE.findall(log)) <= tasks_before:
                return None
            boxes = sandboxes(stack)
            return ("in flight", boxes, log) if boxes else None

        phase, boxes, log = stack.wait_for("the warm-up rollout in flight", warm_up_in_flight, WARM_UP_IN_FLIGHT_S, 1)
        assert phase == "in flight", (
            f"the restarted trainer's warm-up ended before its sandbox was seen:\n{log[-3000:]}"
        )
        # At once: every second spent here is one in which the warm-up might end before the kill.
        stack.compose("kill", "env-server")
        t0 = time.time()
        waits_before = len(WAIT_LINE.findall(log))
        # The warm-up cannot end with the env server gone: a done line now means it ended before the kill landed.
        assert trainer_log(stack).count(WARM_UP_DONE) == done_before, "the warm-up ended before the kill landed"
        assert log.count(run_line) == runs_before + 1 and f"(resuming from checkpoint-{saved})" in log, log[-3000:]
        waiting = stack.wait_for(
            "the restarted trainer to say it waits for rollouts",
            lambda: st if (st := status(stack)).get("state") == "waiting-for-rollouts" else None,
            WARM_UP_WAIT_SAID_S,
            poll_s=1,
        )
        said = time.time() - t0
        assert f"env server {ENV_SERVER}" in waiting["reason"], waiting
        assert waiting["last_checkpoint"] == f"checkpoint-{saved}", waiting  # the restarted trainer's own status
        # Its one line for the lost rollout. Further lines follow only where the reason changes: the server
        # unreachable while it is down, then refusing until tunnel-check has verified the new capture proxy.
        stack.wait_for("the waiting line", lambda: len(WAIT_LINE.findall(trainer_log(stack))) > waits_before, 30, 1)
        said_lines = WAIT_LINE.findall(trainer_log(stack))[waits_before:]
        assert said_lines[0] == LOST_LINE, said_lines
        # Compose leaves a `docker kill`ed service down (docker-kill(1)); the trainer waits, the same process.
        stack.wait_for("env-server to be down", lambda: stack.state("env-server")[0] == "exited", 30, poll_s=1)
        assert stack.state("trainer")[0] == "running" and trainer_run(stack) == started, trainer_log(stack)[-3000:]

        stack.compose("up", "-d", "env-server", timeout=600)
        preflight_log = stack.compose("logs", "--no-color", "preflight", check=False).stdout
        assert stack.state("preflight") == ("exited", 0), preflight_log
        stack.wait_for("env-server healthy", lambda: stack.health("env-server") == "healthy", 300)
        healthy = time.time() - t0
        first = wait_for_step(stack, 1, since=lines_before, timeout_s=STEP_TIMEOUT_S)
        stepped = time.time() - t0
    finally:
        # A failure above must not leave the later cases a stack without env-server or trainer.
        for service in ("env-server", "trainer"):
            if stack.state(service)[0] != "running":
                stack.compose("up", "-d", service, timeout=600, check=False)

    # The same trainer all along: same container, same start, no restart, no death in Docker's own event stream.
    assert stack.state("trainer")[0] == "running" and trainer_run(stack) == started, (started, trainer_run(stack))
    assert not [e for e in stack.events if e["service"] == "trainer" and e["status"] == "die" and e["time"] > t_restart]
    log = trainer_log(stack)
    this_run = log[log.rindex(run_line) :]
    assert "Traceback" not in this_run, this_run[this_run.index("Traceback") :][:3000]
    assert log.count(WARM_UP_DONE) == done_before + 1, "the warm-up did not run again, once, and pass"
    lines = log.splitlines()
    killed_at = [i for i, line in enumerate(lines) if WAIT_LINE.match(line)][waits_before]
    done_at = [i for i, line in enumerate(lines) if WARM_UP_DONE in line][done_before]
    waits = [line for line in lines[killed_at:done_at] if WAIT_LINE.match(line)]
    assert sum("lost during the rollout" in line for line in waits) == 1, waits
    assert sum(ACCEPTED in line for line in lines[killed_at:done_at]) == 1, lines[killed_at : done_at + 1]
    # 0 steps lost: the stop saved the last logged step, and the resumed run's first step is the one after it.
    assert lost == 0 and steps_logged(stack)[lines_before] == saved + 1, (lost, saved, steps_logged(stack))
    # The killed env server's warm-up sandbox was reaped when it started again.
    assert not boxes & sandboxes(stack), sorted(boxes & sandboxes(stack))
    figure = (
        f"waiting said {said:.0f} s, env-server healthy {healthy:.0f} s, step {first} logged {stepped:.0f} s after the "
        f"kill; {len(waits)} waiting line(s); checkpoint-{saved}, resumed at step {saved + 1}, {lost} steps lost; the "
        "trainer never exited"
    )
    stack.figures["env-server docker kill during the warm-up"] = figure
    print(f"\nfaults: env-server docker kill during the warm-up: {figure}")


def test_kill_9_loses_at_most_save_steps(stack):
    have = max(steps_logged(stack))
    wait_for_step(stack, have + 1, since=0)
    stack.compose("kill", "trainer")  # SIGKILL: no handler runs
    stack.wait_for("trainer to be dead", lambda: stack.state("trainer")[0] == "exited", 60, poll_s=1)
    last_logged = max(steps_logged(stack))
    saved = checkpoints(stack)[-1]
    stack.saves.update(checkpoints(stack))
    assert last_logged - saved <= SAVE_STEPS, (last_logged, checkpoints(stack))
    lines_before = len(steps_logged(stack))
    stack.compose("up", "-d", "trainer", timeout=600)
    wait_for_step(stack, 1, since=lines_before)
    assert steps_logged(stack)[lines_before] == saved + 1
    stack.figures["kill -9"] = f"at step {last_logged}, resumed from checkpoint-{saved}: {last_logged - saved} lost"


def test_retention_keeps_exactly_save_total_limit_checkpoints(stack):
    # Saves so far (SIGTERM's and the periodic ones seen); wait for enough more that retention must have
    # deleted at least one: SAVE_TOTAL_LIMIT + 1 distinct saves in this run.
    stack.saves.update(checkpoints(stack))
    last = max(stack.saves)
    more = max(1, SAVE_TOTAL_LIMIT + 1 - len(stack.saves))
    target = (last // SAVE_STEPS + more) * SAVE_STEPS
    wait_for_step(stack, target)
    stack.wait_for("the checkpoint to be complete", lambda: checkpoints(stack)[-1] >= target, 120, poll_s=2)
    kept = checkpoints(stack)
    stack.saves.update(kept)
    assert len(stack.saves) > SAVE_TOTAL_LIMIT, stack.saves
    assert kept == sorted(stack.saves)[-SAVE_TOTAL_LIMIT:], (kept, sorted(stack.saves))
    stack.figures["retention"] = f"kept {kept} of saves {sorted(stack.saves)} (SAVE_TOTAL_LIMIT={SAVE_TOTAL_LIMIT})"


# --- the public surface (the front layer on the capture port), last: the run is still training -----
CAPTURE = f"http://127.0.0.1:{PORTS['CAPTURE_PORT']}"
FIND_PID = (
    "import os\n"
    "for pid in os.listdir('/proc'):\n"
    "    if pid.isdigit() and int(pid) not in (1, os.getpid()):\n"
    "        cmd = open(f'/proc/{pid}/cmdline', 'rb').read()\n"
    "        if b'env_server' in cmd and b'healthcheck' not in cmd:\n"
    "            print([l for l in open(f'/proc/{pid}/status') if l.startswith('VmRSS')][0].split()[1]); break\n"
)


def env_server_rss_mb(stack) -> float:
    cid = stack.container("env-server")["ID"]
    return int(run(["docker", "exec", cid, "python", "-c", FIND_PID]).stdout.strip()) / 1024


def test_unknown_routes_are_404(stack):
    import httpx

    codes = {
        path: httpx.get(CAPTURE + path, timeout=10).status_code
        for path in ("/docs", "/openapi.json", "/v1/models", "/x")
    }
    assert set(codes.values()) == {404}, codes
    stack.figures["unknown routes"] = str(codes)


def test_an_80_mb_unauthenticated_body_is_refused_without_growing_the_env_server(stack):
    import http.client

    before = env_server_rss_mb(stack)
    conn = http.client.HTTPConnection("127.0.0.1", PORTS["CAPTURE_PORT"], timeout=60)
    body = b"x" * (80 * 2**20)
    t0 = time.time()
    try:
        conn.request("POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json"})
        status = conn.getresponse().status
    except (BrokenPipeError, ConnectionResetError):
        status = "closed"  # refused before the body was read: the server closed the socket
    finally:
        conn.close()
    took = time.time() - t0
    growth = env_server_rss_mb(stack) - before
    assert status in (401, 413, "closed"), status
    assert growth < 20, f"env-server RSS grew {growth:.1f} MB"
    stack.figures["80 MB unauthenticated POST"] = (
        f"{status} in {took:.2f} s, env-server RSS {before:.0f} MB -> +{growth:.1f} MB"
    )


def test_200_concurrent_unauthenticated_requests_leave_rollouts_working(stack):
    from concurrent.futures import ThreadPoolExecutor

    import httpx

    def hit(_):
        try:
            return httpx.post(CAPTURE + "/v1/chat/completions", json={"messages": []}, timeout=30).status_code
        except httpx.HTTPError as exc:
            return type(exc).__name__

    have = max(steps_logged(stack))
    t0 = time.time()
    with ThreadPoolExecutor(200) as pool:
        codes = list(pool.map(hit, range(200)))
    took = time.time() - t0
    assert all(c in (401, 429) for c in codes), sorted(set(map(str, codes)))
    wait_for_step(stack, have + 1)
    stack.figures["200 concurrent unauthenticated"] = f"{dict(Counter(codes))} in {took:.1f} s; training went on"


POISON = (
    "import json, os, urllib.request\n"
    "env = {}\n"
    "for pid in os.listdir('/proc'):\n"
    "    try: env = dict(l.split('=', 1) for l in open(f'/proc/{pid}/environ').read().split('\\0') if '=' in l)\n"
    "    except Exception: continue\n"
    "    if env.get('OPENAI_API_BASE') and env.get('OPENAI_API_KEY'): break\n"
    "body = {'model': 'x', 'messages': [{'role': 'user', 'content': 'hi'}], 'temperature': 0.0,\n"
    "        'logprobs': False, 'extra_body': {'guided_regex': '('}, 'poison_field': 'x' * 100}\n"
    "req = urllib.request.Request(env['OPENAI_API_BASE'].rstrip('/') + '/chat/completions', json.dumps(body).encode(),\n"
    "    {'Content-Type': 'application/json', 'Authorization': 'Bearer ' + env['OPENAI_API_KEY']})\n"
    "try: print(urllib.request.urlopen(req, timeout=30).status)\n"
    "except Exception as exc: print(getattr(exc, 'code', type(exc).__name__))\n"
)


def test_a_poisoned_request_from_inside_a_sandbox_leaves_the_run_training(stack):
    """Model-written code holds the session key: it sends fields and sampling of its own through the
    capture port. That rollout may be lost; the run must go on training."""
    box = stack.wait_for("a sandbox with an agent running", lambda: sandboxes(stack), 300, poll_s=1)
    answer = run(["docker", "exec", sorted(box)[0], "python3", "-c", POISON], check=False)
    have = max(steps_logged(stack))
    wait_for_step(stack, have + 2)
    assert stack.state("trainer")[0] == "running" and status(stack).get("state") != "failed"
    stack.figures["poisoned request from a sandbox"] = (
        f"answered {answer.stdout.strip() or answer.stderr.strip()[-80:]}; 2 more steps trained"
    )


# From inside a sandbox: connect to the engine's port on every address by which a container can reach its host (its
# own loopback, the default gateway, host.docker.internal), and, as the control that the probe can reach the host at
# all, to the capture URL the agent was given. Prints one JSON object: address -> "open" or the error.
REACH = (
    "import json, os, socket, struct, urllib.parse\n"
    "port = int(os.environ['ENGINE_PORT_TO_TRY'])\n"
    "targets = {'127.0.0.1': port}\n"
    "for line in open('/proc/net/route').read().splitlines()[1:]:\n"
    "    f = line.split()\n"
    "    if f[1] == '00000000': targets[socket.inet_ntoa(struct.pack('<L', int(f[2], 16)))] = port\n"
    "try: targets[socket.gethostbyname('host.docker.internal')] = port\n"
    "except OSError: pass\n"
    "env = {}\n"
    "for pid in os.listdir('/proc'):\n"
    "    try: env = dict(l.split('=', 1) for l in open(f'/proc/{pid}/environ').read().split('\\0') if '=' in l)\n"
    "    except Exception: continue\n"
    "    if env.get('OPENAI_API_BASE'): break\n"
    "capture = urllib.parse.urlsplit(env['OPENAI_API_BASE'])\n"
    "out = {}\n"
    "for host, p in [*targets.items(), ('capture ' + capture.hostname, capture.port or 80)]:\n"
    "    try:\n"
    "        socket.create_connection((host.split()[-1], p), timeout=3).close(); out[f'{host}:{p}'] = 'open'\n"
    "    except OSError as exc: out[f'{host}:{p}'] = type(exc).__name__\n"
    "print(json.dumps(out))\n"
)


def test_a_sandbox_cannot_reach_the_engine_port(stack):
    """The engine's port binds the host's loopback; a sandbox (docker backend, its own bridge network) cannot reach it
    by any address, while it does reach the capture URL it was given. This is what makes WEIGHT_TRANSFER=ipc's
    VLLM_ALLOW_INSECURE_SERIALIZATION=1 safe (README "One GPU"): nothing but the trainer can post a pickle to it."""
    tried: list[str] = []

    def probe_a_sandbox():
        # A rollout can end between the listing and the exec (its sandbox gone, or its agent exited, so no process
        # holds OPENAI_API_BASE): one run of the suite found no output. Any sandbox that answers will do.
        for name in sorted(sandboxes(stack)):
            out = run(
                ["docker", "exec", "-e", f"ENGINE_PORT_TO_TRY={PORTS['ENGINE_PORT']}", name, "python3", "-c", REACH],
                check=False,
            )
            lines = out.stdout.strip().splitlines()
            if out.returncode == 0 and lines:
                return json.loads(lines[-1])
            tried.append(f"{name}: rc {out.returncode} {out.stderr.strip()[-200:]}")
        return None

    try:
        reached = stack.wait_for("a sandbox that answers the probe", probe_a_sandbox, 300, poll_s=1)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; sandboxes tried: {tried[-5:]}") from None
    engine = {k: v for k, v in reached.items() if not k.startswith("capture ")}
    capture = {k: v for k, v in reached.items() if k.startswith("capture ")}
    assert len(engine) >= 2 and all(v != "open" for v in engine.values()), reached
    assert list(capture.values()) == ["open"], reached
    stack.figures["engine port from a sandbox"] = json.dumps(reached)


# --- the engine gone: last, since each stops the run (it is resumed after each, as the stop line says) -----------
ENGINE = f"http://127.0.0.1:{PORTS['ENGINE_PORT']}"
ENGINE_GONE_EXIT = 4  # trainer/watch/engine_gone.py EXIT_CODE
# From the kill to the trainer's exit (trainer/watch/engine_gone.py). Killed while the trainer computes a step: that step
# (about a minute on CPU), then the push after it fails at once. Killed while it waits for rollouts: GONE_AFTER_S
# (30 s) of /health probes, + TRL's 5 s poll + a 5 s probe. Then, either way, up to 20 s to stop the rollout
# worker, and the save.
ENGINE_GONE_BOUND_S = 180
# Killed during a held-open push: the push fails at once, then the same 20 s and the save.
PUSH_GONE_BOUND_S = 60
GONE_LINE = re.compile(r"^trainer-\d+\s+\|\s+(trainer: the engine at \S+ is gone: .*)$", re.M)


def gone_lines(stack) -> list[str]:
    return GONE_LINE.findall(trainer_log(stack))


def engine_log(stack) -> str:
    return stack.log("engine")


def stopped_then_resumed(stack, kill, bound_s: float) -> tuple[dict, str]:
    """`kill()` the engine; the trainer must exit ENGINE_GONE_EXIT within `bound_s` with the step it trained saved,
    status `stopped` and exactly one line; then the line's two commands resume it at the next step. Returns the
    status at the stop and the figure."""
    lines_before = len(gone_lines(stack))
    kill()
    t0 = time.time()
    stack.wait_for("the trainer to exit", lambda: stack.state("trainer")[0] == "exited", bound_s, poll_s=1)
    stopped_in = time.time() - t0
    assert stack.state("trainer") == ("exited", ENGINE_GONE_EXIT), trainer_log(stack)[-3000:]
    st = status(stack)
    saved = checkpoints(stack)[-1]
    stack.saves.update(checkpoints(stack))
    assert (
        json.loads((stack.run_dir / f"checkpoint-{saved}" / "trainer_state.json").read_text())["global_step"] == saved
    )
    assert (st["state"], st["step"], st["last_checkpoint"]) == ("stopped", saved, f"checkpoint-{saved}"), st
    assert st["reason"].startswith(f"the engine at {ENGINE} is gone: "), st
    # Step N's console line comes after its push, so a push that found the engine gone leaves N saved, N-1 logged.
    last_logged = max(steps_logged(stack))
    assert last_logged <= saved <= last_logged + 1, (last_logged, saved)
    cpu = "scripts/compose -f compose.yaml -f compose.cpu.yaml"
    assert gone_lines(stack)[lines_before:] == [
        f"trainer: {st['reason']}. Stopped (exit 4); step {saved} is saved (checkpoint-{saved}). Compose does not "
        f"restart the engine. To resume: `{cpu} up -d engine`, then `RUN_NAME={stack.run_dir.name} {cpu} up -d "
        "trainer`"
    ], gone_lines(stack)[lines_before:]

    # The line's two steps (RUN_NAME is already in this stack's env file).
    lines_at_stop = len(steps_logged(stack))
    t1 = time.time()
    stack.compose("up", "-d", "engine", timeout=600)
    stack.wait_for("engine healthy", lambda: stack.health("engine") == "healthy", 300)
    stack.compose("up", "-d", "trainer", timeout=600)
    first = wait_for_step(stack, 1, since=lines_at_stop)
    assert f"(resuming from checkpoint-{saved})" in trainer_log(stack)
    assert steps_logged(stack)[lines_at_stop] == saved + 1, steps_logged(stack)[lines_at_stop:]
    path = "in the push" if "weight push" in st["reason"] else "waiting for rollouts"
    return st, (
        f"exit 4 in {stopped_in:.0f} s ({path}), checkpoint-{saved}, {saved - last_logged} step(s) saved past the "
        f"last logged, 0 lost; up -d engine + trainer -> step {first} in {time.time() - t1:.0f} s"
    )


def test_engine_killed_during_a_step_stops_the_trainer_with_the_step_saved_and_up_resumes_it(stack):
    """Compose never restarts the engine: the trainer must not wait for it (nor hang on it). Killed while a
    rollout is in flight: the env server refuses rollouts from then on, and the trainer notices either in the
    push after the step it computes or by the engine's /health while it waits for rollouts."""
    stack.wait_for("a sandbox in flight", lambda: sandboxes(stack), 300, poll_s=1)
    _, figure = stopped_then_resumed(stack, lambda: stack.compose("kill", "engine"), ENGINE_GONE_BOUND_S)
    stack.figures["engine docker kill during a step"] = figure


def test_engine_killed_during_a_weight_push_stops_the_trainer_with_the_step_saved_and_up_resumes_it(stack):
    """A push lasts 0.1 s on CPU, too short to aim a kill at from outside, so the mock holds the next one open
    (its `hold_pause` fault) and the kill lands inside it."""
    import httpx

    held_before = engine_log(stack).count("fault hold_pause: holding")
    httpx.post(f"{ENGINE}/mock/faults", json={"active": ["hold_pause"]}, timeout=10).raise_for_status()
    stack.wait_for(
        "a weight push held open",
        lambda: engine_log(stack).count("fault hold_pause: holding") > held_before,
        STEP_TIMEOUT_S,
        poll_s=1,
    )
    st, figure = stopped_then_resumed(stack, lambda: stack.compose("kill", "engine"), PUSH_GONE_BOUND_S)
    assert re.match(
        rf"the engine at {re.escape(ENGINE)} is gone: pausing it for a weight push failed after \d+\.\d s \(",
        st["reason"],
    ), st["reason"]
    stack.figures["engine docker kill during a weight push"] = figure


def test_pushes_acknowledged_but_not_served_stop_the_run_with_the_step_saved_and_one_line(stack):
    """The served-weights check (trainer/transfer/served_check.py): the mock's `weights_not_served` fault acknowledges every
    push and keeps serving the weights it had. No handshake sees it; the canary does once the trainer's weights
    have moved past the tolerance from the served ones (0.01 nats where both sides are float32, as here: a push or
    two). Last: it ends the run."""
    import httpx

    lines_before = len(steps_logged(stack))
    httpx.post(f"{ENGINE}/mock/faults", json={"active": ["weights_not_served"]}, timeout=10).raise_for_status()
    t0 = time.time()
    stack.wait_for("the trainer to exit", lambda: stack.state("trainer")[0] == "exited", STEP_TIMEOUT_S * 4, poll_s=2)
    assert stack.state("trainer") == ("exited", ENGINE_GONE_EXIT), trainer_log(stack)[-3000:]
    st = status(stack)
    saved = checkpoints(stack)[-1]
    assert (st["state"], st["step"], st["last_checkpoint"]) == ("stopped", saved, f"checkpoint-{saved}"), st
    assert st["reason"].startswith(f"the engine at {ENGINE} does not serve the weights the trainer pushed: "), st
    # Both sides compute in float32 in the CPU form: the check's tolerance is FLOAT32_TOLERANCE_NATS (served_check.py).
    assert re.search(
        r"differ from the trainer's by \d+\.\d{3} nats mean \(max \d+\.\d{3}\), above the 0\.01 nats that float32 noise "
        r"stays under",
        st["reason"],
    ), st["reason"]
    line = [ln for ln in trainer_log(stack).splitlines() if "does not serve the weights the trainer pushed" in ln]
    assert len(line) == 1 and f"Stopped (exit 4); step {saved} is saved (checkpoint-{saved})." in line[0], line
    stack.figures["pushes not served"] = (
        f"stopped in {time.time() - t0:.0f} s, {len(steps_logged(stack)) - lines_before} step(s) after the fault: "
        f"{st['reason'][:160]}"
    )
