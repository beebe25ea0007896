"""The stack's promise, checked by bringing it up: `docker compose up` of the CPU form starts every
service in the designed order and training happens, through the same paths production uses.

Real here: Docker Compose, every image, OpenEnv's capture proxy, Harbor's docker sandboxes running
mini-swe-agent, tunnel-check, TRL's trainer. Stand-ins (and only because the real part cannot be
reached from CI): the mock engine for vLLM (no GPU), the tunnel stand-in for cloudflared (no
Cloudflare), local docker sandboxes for E2B (no E2B), a folder for the bucket.

Waits are on Docker's health states and the trainer's exit, never sleeps. On failure the test prints
`docker compose ps` and the logs. It prints time from `up` to the first training step, total wall
time and the stack's peak memory.
"""

from __future__ import annotations

import json
import re
import secrets
import sys
import time
from pathlib import Path

import pytest
from compose_stack import (
    PROJECT,
    ROOT,
    Stack,
    clean_env,
    docker_objects,
    listening_sockets,
    prepare_run,
    run,
    steps_logged,
    task_images,
)
from service_log import ServiceLog
from support import free_ports

UP_TIMEOUT_S = 30 * 60
TRAIN_TIMEOUT_S = 30 * 60


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    # Secrets an operator would put in .env. None of these values may appear in any log.
    secret_values = {
        "OPENENV_CAPTURE_ADMIN_KEY": "admin-" + secrets.token_hex(12),
        "HF_TOKEN": "hf_" + secrets.token_hex(12),
        "E2B_API_KEY": "e2b_" + secrets.token_hex(12),
    }
    # Its own ports, not the defaults (8000/8001/8100/20241): the test must pass beside whatever else holds those.
    ports = dict(
        zip(("ENGINE_PORT", "ENV_SERVER_PORT", "CAPTURE_PORT", "TUNNEL_METRICS_PORT", "DASHBOARD_PORT"), free_ports(5))
    )
    bucket, trials, env_file = prepare_run(
        "smoke",
        PROJECT,
        {**secret_values, "CPU_MAX_STEPS": "2", "RUN_NAME": "", **{k: str(v) for k, v in ports.items()}},
    )
    env = clean_env()
    before_objects = docker_objects(PROJECT)
    # Whether this stack's task images exist decides whether the first rollouts wait for their build (the
    # time to the first step is printed with this count).
    task_images_before = task_images(PROJECT)

    s = Stack(env_file=env_file, env=env)
    s.secret_values = secret_values
    s.ports = ports
    s.bucket = bucket
    s.trials = trials
    s.before_objects = before_objects
    s.task_images_before = len(task_images_before)
    # Whatever fails, nothing is left running for the next run (test_teardown_* asserts the clean state
    # when everything else passed).
    with s.session():
        yield s


def engine_weights(stack) -> tuple[int, dict]:
    """The mock engine's weight version (one per completed weight sync) and its logprobs for one fixed
    prompt and seed, which change only if the weights it serves changed."""
    import httpx

    engine = f"http://127.0.0.1:{stack.ports['ENGINE_PORT']}"
    version = httpx.get(engine + "/mock/weight_manifest", timeout=30).json()["weight_version"]
    body = {"prompt": "def add(a, b):", "max_tokens": 4, "temperature": 1.0, "seed": 7, "logprobs": 3}
    answer = httpx.post(engine + "/v1/completions", json=body, timeout=60)
    answer.raise_for_status()
    return version, answer.json()["choices"][0]["logprobs"]


@pytest.fixture(scope="module")
def trained(stack):
    """The engine and env-server first (preflight before them; the two start side by side as in a plain
    `up`, and nothing else can start before both are healthy), to read the engine's weights before the
    trainer's first sync; then `up -d --wait`, as the README says, which returns once every service is
    running and healthy (the trainer's healthcheck included); then wait for the trainer to finish its steps.
    Bringing up the engine alone first would start env-server only after it, and the time to the first
    step would measure that detour (measured: +44 s)."""
    try:
        stack.compose("up", "-d", "--wait", "engine", "env-server", timeout=UP_TIMEOUT_S)
        stack.weights_before = engine_weights(stack)
        stack.compose("up", "-d", "--wait", timeout=UP_TIMEOUT_S)
        stack.trainer_health_after_wait = stack.health("trainer")
        # While the run trains: the status command's verdict, with the engine's metrics behind it.
        stack.status_while_training = status_json(stack)
        stack.wait_for(
            "the trainer to finish its steps",
            lambda: stack.state("trainer")[0] == "exited",
            TRAIN_TIMEOUT_S,
            poll_s=5,
        )
        stack.sockets_while_up = listening_sockets(PROJECT)
        stack.weights_after = engine_weights(stack)
        stack.logs = stack.compose("logs", "--no-color", check=False).stdout
        stack.timed_logs = stack.compose("logs", "--no-color", "--timestamps", check=False).stdout
    except BaseException:
        print(stack.diagnostics())
        raise
    return stack


@pytest.fixture(autouse=True)
def _diagnose_on_failure(request, stack):
    yield
    if getattr(request.node, "rep_call", None) is not None and request.node.rep_call.failed:
        print(stack.diagnostics())


def test_trainer_finished_cleanly(trained):
    state, code = trained.state("trainer")
    assert (state, code) == ("exited", 0), f"trainer {state} with exit code {code}"


def test_services_came_up_in_the_designed_order(trained):
    t = trained.first
    done_preflight = [e["time"] for e in trained.events if e["service"] == "preflight" and e["status"] == "die"]
    assert (
        done_preflight
        and [e["exitCode"] for e in trained.events if e["service"] == "preflight" and e["status"] == "die"][0] == "0"
    )
    healthy = {s: t(s, "health_status: healthy") for s in ("engine", "env-server", "tunnel", "tunnel-check")}
    started = {s: t(s, "start") for s in ("engine", "env-server", "tunnel", "tunnel-check", "trainer")}
    assert all(healthy.values()), f"never healthy: {[s for s, v in healthy.items() if not v]}"
    assert done_preflight[0] <= started["engine"] and done_preflight[0] <= started["env-server"]
    assert healthy["env-server"] <= started["tunnel"]
    assert healthy["tunnel"] <= started["tunnel-check"]
    for dep in ("engine", "env-server", "tunnel-check"):
        assert healthy[dep] <= started["trainer"], f"trainer started before {dep} was healthy"


def handoff_verdict(stack) -> dict:
    """The hand-off as the services read it: `stack.handoff.lookup` run inside tunnel-check."""
    return json.loads(stack.compose("exec", "-T", "tunnel-check", "python", "-m", "stack.handoff", check=False).stdout)


def test_tunnel_check_verified_the_url_through_the_stand_in(trained):
    verdict = handoff_verdict(trained)
    doc = verdict["verified"]
    assert doc is not None, verdict
    assert doc["valid_until"] > doc["verified_at"], doc
    host = doc["url"].split("//", 1)[1].split(":")[0]
    assert host not in ("127.0.0.1", "localhost"), (
        f"the advertised URL must be one a sandbox can route to: {doc['url']}"
    )
    assert f"HEALTHY: published {doc['url']}" in trained.compose("logs", "tunnel-check", check=False).stdout


def _run_dir(bucket: Path) -> Path:
    runs = [p for p in (bucket / "checkpoints").iterdir() if p.is_dir()]
    assert len(runs) == 1, f"expected one run under {bucket}/checkpoints, found {runs}"
    return runs[0]


def test_a_checkpoint_landed_on_the_bucket(trained):
    run_dir = _run_dir(trained.bucket)
    checkpoints = sorted(p.name for p in run_dir.glob("checkpoint-*"))
    # CPU_MAX_STEPS=2 with the CPU form's SAVE_STEPS=1 and SAVE_TOTAL_LIMIT=2: both steps kept.
    assert checkpoints == ["checkpoint-1", "checkpoint-2"], sorted(p.name for p in run_dir.iterdir())
    last = run_dir / "checkpoint-2"
    assert json.loads((last / "trainer_state.json").read_text())["global_step"] == 2
    assert any(p.suffix in (".safetensors", ".bin") for p in last.rglob("*")), sorted(last.rglob("*"))


def test_the_trainer_log_read_from_dockers_file_holds_what_compose_prints(trained):
    """The suites wait on step lines read from Docker's json log file (service_log.py), not from compose."""
    from_file = ServiceLog(trained.project, "trainer").read()
    assert from_file is not None, "Docker's log file for the trainer could not be read (run the suites as root)"
    from_compose = trained.compose("logs", "--no-color", "trainer", check=False).stdout
    # The same lines; compose may print a line from stderr before one from stdout written earlier.
    assert sorted(from_file.splitlines()) == sorted(from_compose.splitlines())
    # Each step's console line (status_callback.on_log); the Trainer's end-of-training log (train_runtime) prints the
    # last step's again.
    assert steps_logged(trained) == [1, 2, 2], from_file[-2000:]


def test_rollouts_ran_the_agent_in_sandboxes_with_token_ids_and_no_forking(trained):
    run_dir = _run_dir(trained.bucket)
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "finished" and status["step"] == 2, status
    # The forking tell: one training sample per rollout, however many turns it had. Read over every logged
    # window (the Trainer's log history), not only the last one status.json keeps: which rollouts land in the
    # last window is chance.
    history = json.loads((run_dir / "checkpoint-2" / "trainer_state.json").read_text())["log_history"]

    def windows(key):
        return [entry[key] for entry in history if key in entry]

    assert windows("harbor/forked_rollout_frac") and set(windows("harbor/forked_rollout_frac")) == {0.0}, history
    assert set(windows("rollout/samples_per_rollout")) == {1.0}, history
    assert max(windows("rollout/turns_mean")) > 1, f"rollouts were single-turn, nothing to fork: {history}"
    assert (status["forked_rollout_frac"], status["samples_per_rollout"], status["unscorable_frac"]) == (0.0, 1.0, 0.0)
    # ...and that with the default family's rules on (compose.cpu.yaml MOCK_CHAT_RULES=qwen3: Qwen3's thinking
    # rules, vLLM's hermes split), serving the template the production launcher derives, proven to chain at start.
    engine_log = trained.compose("logs", "--no-color", "engine", check=False).stdout
    assert "mock_engine: qwen3 rules; chat template: the model's chat template with history-keeps-reasoning" in (
        engine_log
    ), engine_log[-2000:]
    assert "; turns chain (TOOL_CALL_PARSER=hermes" in engine_log, engine_log[-2000:]
    # A fully correct answer earns 1.0 plus up to TOOL_EFFICIENCY_BONUS (0.1 by default): a mean of 1.05 is real.
    assert isinstance(status["reward_mean"], float) and 0.0 <= status["reward_mean"] <= 1.1, status
    trials = [p for p in trained.trials.rglob("*") if p.is_dir() and p.name == "agent"]
    assert trials, f"no Harbor trial ran an agent under {trained.trials}"


def test_up_wait_saw_the_trainer_healthy_and_status_gave_a_verdict_with_engine_metrics(trained):
    assert trained.trainer_health_after_wait == "healthy", trained.trainer_health_after_wait
    st = trained.status_while_training
    metrics = st["engine"]["metrics"]
    assert metrics["running"] is not None and metrics["waiting"] is not None, metrics
    line = st["verdict"]
    assert line.startswith("verdict: ") and "engine metrics unavailable" not in line, line
    assert f"engine {metrics['running']:.0f} running, {metrics['waiting']:.0f} waiting, KV cache " in line, line
    print(f"\nsmoke: {line}")


def test_the_engine_serves_the_trained_weights(trained):
    """TRL syncs the weights once before the first step and once after each step: 3 syncs for 2 steps. The
    served logprobs (same prompt, same seed) then change exactly when a step had a gradient: on 2 cores a
    step may train on a zero-spread group only (advantages 0, grad_norm 0), and then nothing moves."""
    (v0, before), (v1, after) = trained.weights_before, trained.weights_after
    assert (v0, v1) == (0, 3), (v0, v1)
    history = json.loads((_run_dir(trained.bucket) / "checkpoint-2" / "trainer_state.json").read_text())["log_history"]
    grad_norms = [entry["grad_norm"] for entry in history if "grad_norm" in entry]
    assert len(grad_norms) == 2, history
    assert (before != after) == any(g > 0 for g in grad_norms), (grad_norms, before, after)
    print(f"\nsmoke: engine weight version 0 -> 3; grad norms {grad_norms}; served logprobs changed: {before != after}")


def test_the_dashboard_serves_the_run_over_http(trained):
    import httpx

    trained.compose("--profile", "dashboard", "up", "-d", "--wait", "dashboard", timeout=600)
    page = httpx.get(f"http://127.0.0.1:{trained.ports['DASHBOARD_PORT']}/", timeout=30)
    assert page.status_code == 200 and "TensorBoard" in page.text, (page.status_code, page.text[:300])
    runs = httpx.get(f"http://127.0.0.1:{trained.ports['DASHBOARD_PORT']}/data/runs", timeout=30).json()
    assert runs, "the dashboard lists no run from the bucket"


def test_only_the_capture_proxy_is_reachable_from_outside_loopback(trained):
    new = trained.sockets_while_up
    assert new, "no listening socket found for the stack's processes: the socket scan is broken"
    exposed = {(a, p) for a, p in new if not a.startswith("127.") and a != "::1"}
    doc = handoff_verdict(trained)["verified"]
    standin_port = int(doc["url"].rsplit(":", 1)[1].split("/")[0])
    assert {p for _, p in exposed} <= {standin_port}, f"listening beyond loopback: {sorted(exposed)}"
    assert not any(a in ("0.0.0.0", "::") for a, _ in new), f"something binds all interfaces: {sorted(new)}"


def running_sandboxes() -> list[str]:
    """Sandbox containers of this stack now: the env server names their compose projects `<stack>--...`."""
    names = run(["docker", "ps", "--format", "{{.Names}}"], check=False).stdout.split()
    return [n for n in names if n.startswith(PROJECT + "--")]


def test_no_secret_reaches_a_log(trained):
    for name, value in trained.secret_values.items():
        assert value not in trained.logs, f"the value of {name} appears in the service logs"


def status_json(stack) -> dict:
    out = run([sys.executable, str(ROOT / "scripts/status"), "--json", "--project", PROJECT], env=stack.env)
    for name, value in stack.secret_values.items():
        assert value not in out.stdout, f"scripts/status printed the value of {name}"
    return json.loads(out.stdout)


def test_status_command_reports_the_running_stack(trained):
    st = status_json(trained)
    services = st["services"]
    assert services["preflight"]["state"] == "exited" and services["preflight"]["exit_code"] == 0
    for name in ("engine", "env-server", "tunnel", "tunnel-check"):
        assert (services[name]["state"], services[name]["health"]) == ("running", "healthy"), (name, services[name])
    assert services["trainer"]["state"] == "exited" and services["trainer"]["exit_code"] == 0
    # `trusted` is stack.handoff.lookup's verdict, the one the env server's rollout gate acts on.
    assert st["tunnel"]["trusted"] is True and st["tunnel"]["verified_ago_s"] < 60, st["tunnel"]
    assert st["tunnel"]["valid_for_s"] > 0, st["tunnel"]
    assert st["engine"]["capture_level"] == "tokens", st["engine"]
    # Rollouts the trainer started but no longer needs run to their end (bounded by AGENT_TIMEOUT_S):
    # status must show them, not hide them: its count agrees with the sandboxes Docker runs for this stack
    # (read at one poll, as they come and go).
    trained.wait_for(
        "status's in-flight count to match the stack's running sandboxes",
        lambda: status_json(trained)["env_server"]["inflight"] == len(running_sandboxes()),
        120,
    )
    assert st["env_server"]["advertised_url"] == st["tunnel"]["url"]
    training = st["training"]
    assert training["state"] == "finished" and training["step"] == 2, training
    assert training["last_checkpoint"] == "checkpoint-2" and training["last_checkpoint_age_s"] >= 0, training
    assert training["samples_per_rollout"] == 1.0, training


def test_killing_the_tunnel_withdraws_the_url_and_refuses_rollouts(trained):
    trained.compose("kill", "tunnel")
    trained.wait_for("tunnel-check to turn unhealthy", lambda: trained.health("tunnel-check") == "unhealthy", 120)
    verdict = handoff_verdict(trained)
    assert verdict["verified"] is None and verdict["record"]["state"] == "withdrawn", verdict
    assert verdict["no_url_because"].startswith("withdrawn: "), verdict
    st = status_json(trained)
    assert st["tunnel"]["trusted"] is False, st["tunnel"]
    assert st["verdict"].startswith("verdict: ROLLOUTS REFUSED: the capture URL is not trusted (withdrawn: "), st
    from openenv.harbor.client import HarborEnv

    from stack.endpoints import openai_base

    engine = openai_base(f"http://127.0.0.1:{trained.ports['ENGINE_PORT']}")
    with HarborEnv(base_url=f"http://127.0.0.1:{trained.ports['ENV_SERVER_PORT']}") as env:
        split = env.splits()[0]["name"]
        result = env.run_rollout(split=split, task_index=0, harness="mini-swe-agent", sandbox="docker", llm_url=engine)
    assert result.reward is None and "tunnel not verified" in (result.error or ""), result


# `docker compose logs --timestamps`: "<service>  | 2026-11-30T06:37:28.121630396Z <line>".
TIMED_LINE = re.compile(r"\|\s(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?Z\s(.*)$")


def logged_at(timed_logs: str, text: str, done: bool = False) -> float | None:
    """The time of the first timestamped log line containing `text` (and, with done, also ": done in"),
    as a Unix time; None when no line has it."""
    from datetime import UTC, datetime

    for line in timed_logs.splitlines():
        match = TIMED_LINE.search(line)
        if match and text in match[3] and (not done or ": done in" in match[3]):
            whole = datetime.fromisoformat(match[1]).replace(tzinfo=UTC).timestamp()
            return whole + float(match[2] or 0)  # Docker prints nanoseconds; fromisoformat takes at most micro
    return None


def test_teardown_leaves_nothing_behind(trained):
    t0 = trained.t_up
    trained.down(check=True)
    after = docker_objects(PROJECT)
    for kind, names in after.items():
        leftover = names - trained.before_objects[kind]
        assert not leftover, f"{kind} left behind: {sorted(leftover)}"
    stopped = status_json(trained)
    assert stopped["services"] == {} and stopped["tunnel"]["state"].startswith("no hand-off volume"), stopped
    status_path = _run_dir(trained.bucket) / "status.json"
    status = json.loads(status_path.read_text())
    assert status.get("first_step_at"), status
    marks = {
        f"{s} healthy": trained.first(s, "health_status: healthy") for s in ("engine", "env-server", "tunnel-check")
    }
    marks["trainer started"] = trained.first("trainer", "start")
    # Where the rest of the time went, from the services' own lines (the first of each).
    for name, line in (
        ("first task image built", "prebuild  "),
        ("warm-up done", "trainer: warm-up rollout done"),
        ("rollout child ready", "rollout child ready"),
        ("first sync", "trainer: first weight sync done"),
    ):
        marks[name] = logged_at(trained.timed_logs, line, done=name == "first task image built")
    print("\nsmoke: " + ", ".join(f"{k} +{v - t0:.0f} s" for k, v in marks.items() if v))
    print(
        f"smoke: up -> first training step {status['first_step_at'] - t0:.0f} s; "
        f"total {time.time() - t0:.0f} s; peak stack memory {trained.peak_mem_bytes / 2**30:.2f} GiB; "
        + (
            "no task sandbox image before up (built during this run, from whatever layers Docker had cached: see "
            "'first task image built' above)"
            if trained.task_images_before == 0
            else f"{trained.task_images_before} task sandbox image(s) already built before up"
        )
    )
