"""The topology, read from `docker compose config` of the production file and of the CPU form: what the
design fixes (host network, loopback only, the one public hop, startup order, GPUs, bucket) holds."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from compose_config import compose_config
from settings_tables import effective

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILES = ["compose.yaml", "compose.cpu.yaml"]


@pytest.fixture(scope="module", params=["production", "cpu"])
def config(request):
    files = COMPOSE_FILES[:1] if request.param == "production" else COMPOSE_FILES
    return compose_config(*files)


@pytest.fixture(scope="module")
def production():
    return compose_config("compose.yaml")


def _strings(node):
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for v in node.values():
            yield from _strings(v)
    elif isinstance(node, list):
        for v in node:
            yield from _strings(v)


def test_the_designed_services_exist(config):
    assert set(config["services"]) == {"preflight", "engine", "env-server", "tunnel", "tunnel-check", "trainer"}


def test_every_service_is_on_the_host_network(config):
    for name, svc in config["services"].items():
        assert svc.get("network_mode") == "host", f"{name} is not on the host network"


def test_nothing_binds_all_interfaces_by_default(config):
    for name, svc in config["services"].items():
        for s in _strings({k: svc.get(k) for k in ("command", "entrypoint", "environment")}):
            assert "0.0.0.0" not in s, f"{name} mentions 0.0.0.0: {s!r}"
        for key, value in (svc.get("environment") or {}).items():
            if key.endswith("_HOST") and value:
                assert value == "127.0.0.1", f"{name}: {key}={value} must default to 127.0.0.1"


def test_the_tunnel_only_publishes_the_capture_port(production):
    tunnel = production["services"]["tunnel"]
    command = " ".join(tunnel["command"])
    capture_port = effective(production["services"]["env-server"]["environment"], "CAPTURE_PORT")
    targets = re.findall(r"--url\s+(\S+)", command)
    assert targets == [f"http://127.0.0.1:{capture_port}"], command
    assert re.search(r"--metrics 127\.0\.0\.1:\d+", command), "cloudflared metrics must bind loopback"
    # Nothing else from the stack is handed to the tunnel.
    assert not (set(tunnel.get("environment") or {}) - {"TUNNEL_TOKEN"})


def test_cpu_stand_in_targets_the_capture_port_too():
    cpu = compose_config(*COMPOSE_FILES)
    tunnel = cpu["services"]["tunnel"]
    assert tunnel["environment"]["CAPTURE_PORT"] == cpu["services"]["env-server"]["environment"]["CAPTURE_PORT"]
    assert not tunnel.get("profiles"), "the stand-in must always run in the CPU form"


def test_named_tunnel_switch_keeps_the_token_out_of_the_command():
    cfg = compose_config("compose.yaml", env={"TUNNEL_TOKEN": "s3cret-token-value"})
    command = cfg["services"]["tunnel"]["command"]
    assert command[-1] == "run" and "s3cret-token-value" not in " ".join(command)


ORDER = {
    "engine": {"preflight": "service_completed_successfully"},
    "env-server": {"preflight": "service_completed_successfully"},
    "tunnel": {"env-server": "service_healthy"},
    "tunnel-check": {"env-server": "service_healthy", "tunnel": "service_healthy"},
    "trainer": {
        "preflight": "service_completed_successfully",
        "engine": "service_healthy",
        "env-server": "service_healthy",
        "tunnel-check": "service_healthy",
    },
}


def test_startup_order_is_depends_on_conditions(config):
    for name, want in ORDER.items():
        got = {dep: spec["condition"] for dep, spec in (config["services"][name].get("depends_on") or {}).items()}
        assert got == want, f"{name} depends_on {got}, design says {want}"
    assert config["services"]["tunnel-check"]["depends_on"]["tunnel"]["required"] is False


def test_no_service_sleeps_its_way_into_order(config):
    for name, svc in config["services"].items():
        for s in _strings({k: svc.get(k) for k in ("command", "entrypoint")}):
            assert not re.search(r"\bsleep\b", s), f"{name} sleeps: {s!r}"


def test_services_that_need_health_have_a_real_healthcheck(config):
    for name in ("engine", "env-server", "tunnel", "tunnel-check"):
        test = config["services"][name]["healthcheck"]["test"]
        assert test[0] == "CMD" and "/health" not in " ".join(test), f"{name}: healthcheck {test}"
    assert config["services"]["engine"]["healthcheck"]["test"][-1] == "engine.probe"


def _gpu_ids(svc):
    devices = svc["deploy"]["resources"]["reservations"]["devices"]
    return [d for dev in devices for d in dev.get("device_ids", [])]


def test_gpus_engine_zero_trainer_one_and_overridable(production):
    assert _gpu_ids(production["services"]["engine"]) == ["0"]
    assert _gpu_ids(production["services"]["trainer"]) == ["1"]
    moved = compose_config("compose.yaml", env={"ENGINE_GPUS": "2,3", "TRAINER_GPUS": "4"})
    assert _gpu_ids(moved["services"]["engine"]) == ["2,3"]
    assert _gpu_ids(moved["services"]["trainer"]) == ["4"]
    for name in ("engine", "trainer"):
        assert production["services"][name].get("ipc") == "host", f"{name} needs ipc: host for NCCL"


def test_cpu_form_reserves_no_gpu():
    cpu = compose_config(*COMPOSE_FILES)
    for name, svc in cpu["services"].items():
        assert "deploy" not in svc or not svc["deploy"].get("resources"), f"{name} reserves a device in the CPU form"


def test_bucket_is_bound_into_trainer_engine_and_preflight(production):
    for name in ("trainer", "engine", "preflight"):
        binds = [v for v in production["services"][name].get("volumes", []) if v["target"] == "/bucket"]
        assert binds and binds[0]["type"] == "bind" and binds[0]["source"] == "/mnt/bucket", name
    env = production["services"]["trainer"]["environment"]
    assert env["HF_HOME"].startswith("/bucket/")


def test_secrets_only_reach_the_services_that_use_them(production):
    allowed = {
        "E2B_API_KEY": {"env-server", "preflight"},
        "TUNNEL_TOKEN": {"tunnel", "preflight"},
        "HF_TOKEN": {"engine", "trainer", "env-server"},
        "OPENENV_CAPTURE_ADMIN_KEY": {"env-server"},
        "HUB_TOKEN": {"trainer"},
        "WANDB_API_KEY": {"trainer"},
    }
    for secret, services in allowed.items():
        have = {n for n, s in production["services"].items() if secret in (s.get("environment") or {})}
        assert have <= services, f"{secret} reaches {sorted(have - services)}"


def _variables_read_by_compose() -> set[str]:
    names = set()
    for f in (*COMPOSE_FILES, "compose.one-gpu.yaml"):
        names |= set(re.findall(r"\$\{([A-Z][A-Z0-9_]*)", (ROOT / f).read_text()))
    return names


def test_every_compose_variable_is_documented_in_env_example():
    lines = (ROOT / ".env.example").read_text().splitlines()
    documented = {}
    for i, line in enumerate(lines):
        m = re.match(r"([A-Z][A-Z0-9_]*)=", line)
        if m:
            documented[m.group(1)] = i
    cpu_only = {n for n in _variables_read_by_compose() if n.startswith(("CPU_", "MOCK_", "STANDIN_"))}
    missing = _variables_read_by_compose() - set(documented) - cpu_only
    assert not missing, f".env.example lacks {sorted(missing)}"
    for name, i in documented.items():
        assert i > 0 and lines[i - 1].startswith("#"), f".env.example: {name} has no comment above it"


def test_cpu_only_knobs_are_documented_in_the_cpu_form_doc():
    doc = (ROOT / "docs" / "CPU-FORM.md").read_text()
    for name in {n for n in _variables_read_by_compose() if n.startswith(("CPU_", "MOCK_", "STANDIN_"))}:
        assert name in doc, f"{name} (CPU form) must be described in docs/CPU-FORM.md"


def test_eval_datasets_are_served_and_hub_endpoint_is_never_empty(production):
    env_server = production["services"]["env-server"]["environment"]
    trainer = production["services"]["trainer"]["environment"]
    assert "EVAL_DATASETS" in env_server and "EVAL_DATASETS" in trainer
    # huggingface_hub takes HF_ENDPOINT="" as the Hub's address: compose must never pass it empty.
    assert trainer["HF_ENDPOINT"] == "https://huggingface.co"


def test_stateless_services_restart_and_stateful_ones_do_not(config):
    services = config["services"]
    # The tunnel, its check and the env server hold nothing a restart loses; a restarted engine would
    # have left the trainer's weight-transfer group, a restarted trainer with a fresh name starts another run.
    for name in ("tunnel", "tunnel-check", "env-server"):
        assert services[name]["restart"] == "unless-stopped", name
    for name in ("engine", "trainer", "preflight"):
        assert services[name]["restart"] == "no", name


# The engine-trainer NCCL transport, as measured safe when each container sees only its own GPU
# (compose.yaml's x-nccl-env says why each value): P2P and cuMem off together, rendezvous on loopback.
SAFE_TRANSPORT = {
    "NCCL_P2P_DISABLE": "1",
    "NCCL_CUMEM_ENABLE": "0",
    "VLLM_HOST_IP": "127.0.0.1",
    "NCCL_SOCKET_IFNAME": "lo",
}


def _nccl_env(svc: dict) -> dict:
    env = svc.get("environment") or {}
    return {k: v for k, v in env.items() if k.startswith("NCCL_") or k == "VLLM_HOST_IP"}


def test_nccl_transport_is_explicit_and_the_same_on_both_sides(production):
    engine, trainer = (_nccl_env(production["services"][n]) for n in ("engine", "trainer"))
    for name, env in (("engine", engine), ("trainer", trainer)):
        got = {k: env.get(k) for k in SAFE_TRANSPORT}
        assert got == SAFE_TRANSPORT, f"{name}: NCCL transport {got}, safe default is {SAFE_TRANSPORT}"
        assert (env.get("NCCL_DEBUG"), env.get("NCCL_DEBUG_SUBSYS")) == ("INFO", "INIT,ENV"), name
    assert engine == trainer, "the engine and the trainer must take the same NCCL transport"


def test_the_p2p_switch_moves_both_sides_together():
    cfg = compose_config("compose.yaml", env={"NCCL_P2P_DISABLE": "0", "NCCL_CUMEM_ENABLE": "1"})
    for name in ("engine", "trainer"):
        env = _nccl_env(cfg["services"][name])
        assert (env["NCCL_P2P_DISABLE"], env["NCCL_CUMEM_ENABLE"]) == ("0", "1"), name
        assert env["VLLM_HOST_IP"] == "127.0.0.1", f"{name}: the switch must not move the rendezvous"


def test_the_rendezvous_stays_on_loopback_whatever_the_env_file_says():
    """VLLM_HOST_IP is not an operator variable: an .env that sets it must not move the rendezvous."""
    cfg = compose_config("compose.yaml", env={"VLLM_HOST_IP": "10.0.0.5", "NCCL_SOCKET_IFNAME": "eth0"})
    for name in ("engine", "trainer"):
        env = _nccl_env(cfg["services"][name])
        assert (env["VLLM_HOST_IP"], env["NCCL_SOCKET_IFNAME"]) == ("127.0.0.1", "lo"), name


# Every service that runs the trainer image; preflight, the first to run, is the one that builds it.
TRAINER_IMAGE_SERVICES = {"preflight", "trainer", "dashboard"}
FORMS = pytest.mark.parametrize(
    ("files", "form", "base"),
    [
        (COMPOSE_FILES[:1], "gpu", "vllm/vllm-openai:"),
        (COMPOSE_FILES, "cpu", "asyncgrpo-harbor/mock-engine:"),
    ],
    ids=["production", "cpu"],
)


def _every_service(files):
    return compose_config(*files, env={"COMPOSE_PROFILES": "cloudflared,dashboard"})["services"]


@FORMS
def test_the_trainer_image_form_is_a_build_argument(files, form, base):
    """The trainer Dockerfile does not guess its form from the base: a vLLM base whose Python it did not
    find once became a CPU image without vllm. Each compose file states the form with the base it pairs."""
    services = _every_service(files)
    built = {
        name: svc["build"]
        for name, svc in services.items()
        if (svc.get("build") or {}).get("dockerfile") == "images/trainer/Dockerfile"
    }
    assert set(built) == {"preflight"}
    args = built["preflight"].get("args") or {}
    assert args.get("TRAINER_FORM") == form, f"TRAINER_FORM={args.get('TRAINER_FORM')!r}, want {form!r}"
    assert args.get("BASE_IMAGE", "").startswith(base), f"the {form} form builds FROM {base}*"


@FORMS
def test_each_image_is_built_by_one_service(files, form, base):
    """Two services building one tag build it twice, and the first build is left dangling (5.8 GB for the
    trainer image). The others run the tag as built and never look for it on a registry, where any
    `asyncgrpo-harbor/trainer:local` found would be someone else's image."""
    services = _every_service(files)
    builders: dict[str, list[str]] = {}
    for name, svc in services.items():
        if svc.get("build"):
            builders.setdefault(svc["image"], []).append(name)
    assert {image: names for image, names in builders.items() if len(names) > 1} == {}
    assert {name for name, svc in services.items() if svc["image"].startswith("asyncgrpo-harbor/trainer:")} == (
        TRAINER_IMAGE_SERVICES
    )
    for name in TRAINER_IMAGE_SERVICES - {"preflight"}:
        assert services[name].get("pull_policy") == "never", name
    # `up` and `run trainer` alike bring preflight, and with it the image's build, first.
    assert "preflight" in services["trainer"]["depends_on"]


def test_the_trainer_dockerfile_decides_its_form_by_the_argument_only():
    text = (ROOT / "images" / "trainer" / "Dockerfile").read_text()
    assert re.search(r"^ARG TRAINER_FORM=gpu$", text, re.M), "the Dockerfile's default form is gpu (its default base)"
    assert 'select-python "$TRAINER_FORM"' in text, "the form is checked against the base before any install"
    assert "find_spec" not in text, "the form must not be guessed from what the base contains"


PICK_POLICY_DOCKERFILE = "images/pick-policy/Dockerfile"


def test_only_the_form_that_learns_pays_for_the_pick_policy():
    """The pick policy's fit (about 600 CPU-s; 549 s of wall time on 2 cores) was in the plain
    mock-engine image, so every cold `scripts/cpu-up` paid for a policy it never served. It is fitted into
    images of compose.learn.yaml's own, FROM the plain ones, each built by one service."""
    assert "build_policy" not in (ROOT / "images" / "mock-engine" / "Dockerfile").read_text()
    plain = _every_service(COMPOSE_FILES)
    assert [n for n, svc in plain.items() if (svc.get("build") or {}).get("dockerfile") == PICK_POLICY_DOCKERFILE] == []

    learn = _every_service([*COMPOSE_FILES, "compose.learn.yaml"])
    fitted = {
        name: (svc["image"], svc["build"]["args"]["BASE_IMAGE"], svc["build"]["args"]["ENGINE_IMAGE"])
        for name, svc in learn.items()
        if (svc.get("build") or {}).get("dockerfile") == PICK_POLICY_DOCKERFILE
    }
    assert fitted == {
        "engine": (
            "asyncgrpo-harbor/mock-engine-learn:local",
            "asyncgrpo-harbor/mock-engine:local",
            "asyncgrpo-harbor/mock-engine:local",
        ),
        "preflight": (
            "asyncgrpo-harbor/trainer-learn:local",
            "asyncgrpo-harbor/trainer:local",
            "asyncgrpo-harbor/mock-engine:local",
        ),
    }
    assert learn["trainer"]["image"] == "asyncgrpo-harbor/trainer-learn:local"
    assert learn["trainer"]["pull_policy"] == "never"
    assert learn["engine"]["environment"]["MOCK_MODEL_DIR"] == "/app/models/pick-policy"
    builders: dict[str, list[str]] = {}
    for name, svc in learn.items():
        if svc.get("build"):
            builders.setdefault(svc["image"], []).append(name)
    assert {image: names for image, names in builders.items() if len(names) > 1} == {}


# --- the one-GPU form (compose.one-gpu.yaml) ------------------------------------------------------------------------
ONE_GPU_FILES = ["compose.yaml", "compose.one-gpu.yaml"]


@pytest.fixture(scope="module")
def one_gpu():
    return compose_config(*ONE_GPU_FILES, env={"ENGINE_GPU_MEMORY_UTILIZATION": "0.38"})


def test_one_gpu_puts_engine_and_trainer_on_the_same_device(one_gpu):
    assert _gpu_ids(one_gpu["services"]["engine"]) == _gpu_ids(one_gpu["services"]["trainer"]) == ["0"]
    moved = compose_config(*ONE_GPU_FILES, env={"ENGINE_GPUS": "3"})
    assert _gpu_ids(moved["services"]["engine"]) == _gpu_ids(moved["services"]["trainer"]) == ["3"]
    # One reservation each: the trainer's production device 1 is replaced, not added to.
    assert len(one_gpu["services"]["trainer"]["deploy"]["resources"]["reservations"]["devices"]) == 1


def test_one_gpu_shares_ipc_and_the_engines_pid_namespace(one_gpu):
    services = one_gpu["services"]
    assert services["engine"]["ipc"] == services["trainer"]["ipc"] == "host"
    assert services["trainer"]["pid"] == "service:engine"
    assert "pid" not in services["engine"]  # the engine keeps its own namespace; the host's is shared with no one


def test_one_gpu_sets_ipc_on_every_side_and_hands_the_engine_share_to_the_engine_and_preflight(one_gpu):
    services = one_gpu["services"]
    for name in ("preflight", "engine", "trainer"):
        assert services[name]["environment"]["WEIGHT_TRANSFER"] == "ipc", name
    assert services["preflight"]["environment"]["REQUIRED_GPUS"] == "1"
    assert services["engine"]["environment"]["ENGINE_GPU_MEMORY_UTILIZATION"] == "0.38"
    assert services["preflight"]["environment"]["ENGINE_GPU_MEMORY_UTILIZATION"] == "0.38"
    # Expandable segments share memory through pidfd_getfd, which Docker's seccomp profile refuses without ptrace.
    assert services["trainer"]["environment"]["PYTORCH_CUDA_ALLOC_CONF"] == ""


def test_the_two_gpu_form_hands_the_engine_its_weight_transfer(production):
    assert production["services"]["engine"]["environment"]["WEIGHT_TRANSFER"] == ""  # the launcher's default: nccl
    assert "pid" not in production["services"]["trainer"]


def test_one_gpu_engine_still_binds_loopback_only(one_gpu):
    assert one_gpu["services"]["engine"]["environment"]["ENGINE_HOST"] == "127.0.0.1"
    assert one_gpu["services"]["engine"]["network_mode"] == "host"
