"""The version set is one set: every place that names a version agrees with requirements/constraints.txt,
and every pin sits inside what its neighbours declare (checked against their real wheel metadata,
copied into requirements/upstream/)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def constraints() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements/constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"constraints.txt: {line!r} is not an exact pin"
            pins[_norm(name)] = version
    return pins


def upstream_requires(name: str) -> list[Requirement]:
    (path,) = (ROOT / "requirements/upstream").glob(f"{name}-*.requires")
    lines = [ln for ln in path.read_text().splitlines() if ln and not ln.startswith("#")]
    return [Requirement(ln) for ln in lines]


def test_upstream_metadata_is_for_the_pinned_releases():
    pins = constraints()
    for name in ("vllm", "trl", "openenv"):
        (path,) = (ROOT / "requirements/upstream").glob(f"{name}-*.requires")
        assert path.name == f"{name}-{pins[name]}.requires", (
            f"{path.name} describes another {name} than the pinned {pins[name]}: refresh it "
            "(the command is in its header)"
        )


def test_vllm_is_inside_trls_vllm_extra():
    pins = constraints()
    spec = next(
        r.specifier
        for r in upstream_requires("trl")
        if _norm(r.name) == "vllm" and r.marker and "vllm" in str(r.marker)
    )
    assert Version(pins["vllm"]) in spec, f"trl {pins['trl']} allows vllm{spec}, pinned {pins['vllm']}"


@pytest.mark.parametrize("package", ["torch", "transformers", "huggingface-hub", "tokenizers", "requests"])
def test_pin_satisfies_vllms_own_requirement(package):
    pins = constraints()
    reqs = [r for r in upstream_requires("vllm") if _norm(r.name) == package and not r.marker]
    assert reqs, f"vllm {pins['vllm']} no longer names {package}: update this test"
    for req in reqs:
        assert Version(pins[package]) in req.specifier, (
            f"vllm {pins['vllm']} requires {req}, constraints.txt pins {package}=={pins[package]}"
        )


def documented_conflicts() -> dict[str, tuple[str, str]]:
    """PINS.md's table of conflicts the trainer image resolves: package -> (vllm's declared spec, pin)."""
    text = (ROOT / "PINS.md").read_text()
    section = text.split("## The conflicts the trainer image resolves, deliberately", 1)
    assert len(section) == 2, "PINS.md lost its section on the conflicts the trainer image resolves"
    rows = {}
    for line in section[1].split("\n## ", 1)[0].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and re.fullmatch(r"[\w.\-]+", cells[0]) and cells[0] != "package" and set(cells[0]) != {"-"}:
            assert all(cells[3:]), f"PINS.md: the {cells[0]} row must say why it is needed and why it is safe"
            rows[_norm(cells[0])] = (cells[1].strip("`"), cells[2])
    return rows


def test_the_documented_conflicts_are_the_only_ones():
    """Every vllm requirement a pin violates is in PINS.md's table, with vllm's real spec and our pin;
    any other is a new conflict nobody has reasoned about."""
    pins = constraints()
    environment = {"python_version": "3.12", "platform_machine": "x86_64", "platform_system": "Linux", "extra": ""}
    violated = {
        _norm(r.name): r
        for r in upstream_requires("vllm")
        if _norm(r.name) in pins
        and (r.marker is None or r.marker.evaluate(environment))
        and Version(pins[_norm(r.name)]) not in r.specifier
    }
    documented = documented_conflicts()
    assert set(violated) == set(documented), (
        f"pins outside vllm's declared ranges: {sorted(violated)}; PINS.md documents: {sorted(documented)}"
    )
    for name, req in violated.items():
        declared, pinned = documented[name]
        assert declared == str(req).split(";")[0], f"PINS.md says vllm declares {declared!r} for {name}, it is {req}"
        assert pinned == pins[name], f"PINS.md says {name} is pinned {pinned}, constraints.txt {pins[name]}"


def test_openenv_pins_satisfy_openenv():
    pins = constraints()
    for req in upstream_requires("openenv"):
        if req.marker is None and _norm(req.name) in pins:
            assert Version(pins[_norm(req.name)]) in req.specifier, f"openenv needs {req}"


def test_pins_table_matches_constraints():
    pins = constraints()
    table = {}
    for line in (ROOT / "PINS.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and re.fullmatch(r"[\w.\-]+", cells[0]) and re.fullmatch(r"[\d.]+", cells[1]):
            table[_norm(cells[0])] = cells[1]
    for name, version in table.items():
        assert pins.get(name) == version, f"PINS.md says {name} {version}, constraints.txt {pins.get(name)}"
    missing = {
        "trl",
        "openenv",
        "harbor",
        "vllm",
        "torch",
        "mini-swe-agent",
        "e2b",
        "huggingface-hub",
        "requests",
    } - set(table)
    assert not missing, f"PINS.md lacks a row (and a reason) for {sorted(missing)}"


def _dockerfile_base_default(image: str) -> str:
    text = (ROOT / "images" / image / "Dockerfile").read_text()
    match = re.search(r"^ARG BASE_IMAGE=(\S+)", text, re.M)
    assert match, f"images/{image}/Dockerfile must take its base as `ARG BASE_IMAGE=<public image>`"
    assert re.search(r"^FROM \$\{BASE_IMAGE\}", text, re.M), (
        f"images/{image}/Dockerfile must build FROM ${{BASE_IMAGE}}"
    )
    return match.group(1)


def test_engine_and_trainer_images_carry_the_pinned_vllm():
    vllm = constraints()["vllm"]
    want = f"vllm/vllm-openai:v{vllm}"
    for image in ("engine", "trainer"):
        assert _dockerfile_base_default(image) == want, f"images/{image} must default to {want}"
    assert f"${{VLLM_IMAGE:-{want}}}" in (ROOT / "compose.yaml").read_text()
    assert f"VLLM_IMAGE={want}" in (ROOT / ".env.example").read_text()


@pytest.mark.parametrize("image", sorted(p.parent.name for p in (ROOT / "images").glob("*/Dockerfile")))
def test_every_dockerfile_takes_its_base_as_an_argument(image):
    base = _dockerfile_base_default(image)
    assert "/" in base or ":" in base, f"{image}: default base {base!r} should be the public image a user pulls"


def test_cloudflared_tag_agrees():
    compose = (ROOT / "compose.yaml").read_text()
    env = (ROOT / ".env.example").read_text()
    tag = re.search(r"\$\{CLOUDFLARED_IMAGE:-([^}]+)\}", compose).group(1)
    assert f"CLOUDFLARED_IMAGE={tag}" in env
    assert tag.split(":")[1] in (ROOT / "PINS.md").read_text()


def test_requirement_files_name_no_versions():
    """Versions live in constraints.txt only, so no image can quietly pin something else."""
    for path in (ROOT / "requirements").glob("*.txt"):
        if path.name in ("constraints.txt", "cpu-torch-overrides.txt"):
            continue
        for line in path.read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if line:
                assert not re.search(r"[=<>!~]", line), (
                    f"{path.name}: {line!r} pins a version; pin it in constraints.txt"
                )
