"""Where the stack stands, at a glance: services, the public URL, the engine's capture level, sandboxes
in flight, training progress and the bucket, GPU memory. Runs on the host with the system Python
(stdlib only); works against a running stack and a stopped one. Never prints a secret: it reads no
environment values of the services, only states, the hand-off document and the trainer's status file.

Usage: scripts/status [--json] [--project NAME]   (scripts/status runs this module's main)
"""

from __future__ import annotations

import argparse
import calendar
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from stack import handoff as handoff_record
from stack.facts import DEFAULT_PORTS, HANDOFF_VOLUME

# All stdlib-only by design, so the host's system Python runs them: the engine's healthcheck probe, the
# shared facts (the hand-off's one reading, its file and volume names) and status's own figures.
from stack.serving.chain import RECORD as CHAIN_RECORD
from stack.serving.probe import PROVEN_FILE, UNPROVEN_OK, Unhealthy, probe

from . import figures, prometheus
from .verdict import verdict

# Seconds between the two scrapes of the engine's counters that give its generation throughput.
SCRAPE_INTERVAL_S = 1.0

SERVICES = ["preflight", "engine", "env-server", "tunnel", "tunnel-check", "trainer"]
# The services whose job ends: exit 0 is their success, where for the others it is a stop.
RUN_TO_COMPLETION = {"preflight", "trainer"}
# The only service settings status reads, besides the *_PORT ones: the model the operator accepted with
# unproven logprobs (a model id, not a secret). The engine's healthcheck judges with it, so status must too.
SHARED_SETTINGS = (UNPROVEN_OK,)
# Where the engine's healthcheck remembers the model it proved processed logprobs for, inside its container.
ENGINE_PROVEN_FILE = f"/tmp/{PROVEN_FILE.name}"
# Where the engine's launcher recorded which chat template it serves and whether turns chain under it.
ENGINE_TEMPLATE_FILE = f"/tmp/{CHAIN_RECORD.name}"


def sh(args: list[str], timeout: float = 20) -> str:
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


def containers(project: str) -> dict[str, dict]:
    ids = sh(["docker", "ps", "-aq", "--filter", f"label=com.docker.compose.project={project}"]).split()
    if not ids:
        return {}
    out = {}
    for c in json.loads(sh(["docker", "inspect", *ids]) or "[]"):
        service = c["Config"]["Labels"].get("com.docker.compose.service", c["Name"])
        state = c["State"]
        out[service] = {
            "state": state.get("Status"),
            "exit_code": state.get("ExitCode") if state.get("Status") == "exited" else None,
            "health": (state.get("Health") or {}).get("Status"),
            "last_health_output": ((state.get("Health") or {}).get("Log") or [{}])[-1].get("Output", "").strip()[-300:],
            "started_at": state.get("StartedAt"),
            "bucket": next((m["Source"] for m in c.get("Mounts", []) if m.get("Destination") == "/bucket"), None),
            "id": c.get("Id"),
            "settings": _shared_env(c["Config"].get("Env") or []),
        }
    return out


def _shared_env(env: list[str]) -> dict[str, str]:
    # Only the *_PORT settings and SHARED_SETTINGS: never copy other environment values (they may be secrets).
    return {k: v for k, _, v in (e.partition("=") for e in env) if k.endswith("_PORT") or k in SHARED_SETTINGS}


def handoff(project: str) -> dict:
    mount = sh(["docker", "volume", "inspect", "-f", "{{.Mountpoint}}", f"{project}_{HANDOFF_VOLUME}"]).strip()
    if not mount:
        return {"state": "no hand-off volume (stack never started)"}
    # The record as written (for its times and reason), and the verdict the env server acts on: the one
    # reading of the hand-off (stack.handoff.lookup), so status cannot disagree with the gate.
    doc = handoff_record.read_raw(mount)
    verified, why = handoff_record.lookup(mount)
    doc["trusted"], doc["untrusted_reason"] = verified is not None, why
    now = time.time()
    for key in ("verified_at", "published_at", "withdrawn_at", "valid_until"):
        if doc.get(key):
            name = "valid_for_s" if key == "valid_until" else key.replace("_at", "_ago_s")
            doc[name] = round(float(doc[key]) - now if key == "valid_until" else now - float(doc[key]), 1)
    return doc


def engine_metrics(port: str) -> dict:
    url = f"http://127.0.0.1:{port}/metrics"
    first = prometheus.scrape(url)
    if isinstance(first, str):
        return {"error": first}
    time.sleep(SCRAPE_INTERVAL_S)
    second = prometheus.scrape(url)
    if isinstance(second, str):
        return {"error": second}
    return figures.engine(first, second, SCRAPE_INTERVAL_S)


def edge_connections(port: str) -> float | None:
    scraped = prometheus.scrape(f"http://127.0.0.1:{port}/metrics")
    return None if isinstance(scraped, str) else scraped.get(figures.EDGE_CONNECTIONS)


def engine_proven(container_id: str | None) -> str:
    """The model the engine's own healthcheck proved processed logprobs for ('' when none or unreadable)."""
    if not container_id:
        return ""
    return sh(["docker", "exec", container_id, "cat", ENGINE_PROVEN_FILE], timeout=10).strip()


def engine_template(container_id: str | None) -> str:
    """The launcher's line: the chat template served and whether turns chain under it ('' when unreadable)."""
    if not container_id:
        return ""
    return sh(["docker", "exec", container_id, "cat", ENGINE_TEMPLATE_FILE], timeout=10).strip()


def engine_level(port: str, accepted_for: str = "", proven: str = "") -> dict:
    """The engine probe the engine's healthcheck runs, with the same inputs: the model accepted by
    ENGINE_LOGPROBS_UNPROVEN_OK in the engine's settings, and the model it already proved (its record)."""
    try:
        with tempfile.TemporaryDirectory() as tmp:
            proven_file = Path(tmp, PROVEN_FILE.name)
            if proven:
                proven_file.write_text(proven)
            verdict = probe(f"http://127.0.0.1:{port}", timeout=10, accepted_for=accepted_for, proven_file=proven_file)
        return {"capture_level": "tokens", "detail": verdict}
    except Unhealthy as exc:
        return {"capture_level": "unreachable" if "not reachable" in str(exc) else "below tokens", "detail": str(exc)}
    except (OSError, ValueError, KeyError) as exc:
        return {"capture_level": "unreachable", "detail": f"{type(exc).__name__}: {exc}"}


def env_server(port: str) -> dict:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/stack/status", timeout=5) as resp:
            return json.loads(resp.read())
    except (OSError, ValueError, urllib.error.URLError) as exc:
        return {"error": f"not reachable ({exc})"}


def training(bucket: str | None) -> dict:
    if not bucket:
        return {"missing": "no bucket mount found (trainer and preflight never created)"}
    runs = sorted(Path(bucket, "checkpoints").glob("*/status.json"), key=lambda p: p.stat().st_mtime)
    if not runs:
        return {"bucket": bucket, "missing": "no run has written a status yet"}
    status = json.loads(runs[-1].read_text())
    now = time.time()
    checkpoints = sorted(runs[-1].parent.glob("checkpoint-*"), key=lambda p: p.stat().st_mtime)
    status["bucket"] = bucket
    status["run_dir"] = str(runs[-1].parent)
    if checkpoints:
        status["last_checkpoint"] = checkpoints[-1].name
        status["last_checkpoint_age_s"] = round(now - checkpoints[-1].stat().st_mtime, 1)
    if status.get("updated_at"):
        try:
            updated = calendar.timegm(time.strptime(status["updated_at"], "%Y-%m-%dT%H:%M:%SZ"))
            status["updated_ago_s"] = round(now - updated, 1)
        except (TypeError, ValueError):
            pass
    return status


def gpus() -> list[dict]:
    if not shutil.which("nvidia-smi"):
        return []
    out = sh(["nvidia-smi", "--query-gpu=index,name,memory.used,memory.total", "--format=csv,noheader,nounits"])
    rows = []
    for line in out.splitlines():
        idx, name, used, total = [x.strip() for x in line.split(",")]
        rows.append({"index": int(idx), "name": name, "used_mib": int(used), "total_mib": int(total)})
    return rows


def collect(project: str) -> dict:
    svc = containers(project)
    ids = {name: s.pop("id", None) for name, s in svc.items()}
    settings = {name: s.pop("settings", {}) for name, s in svc.items()}
    ports = {}
    for values in settings.values():
        # Compose passes an unset port as "" (`${ENGINE_PORT:-}`: the service's own default); taken as the port,
        # a fresh clone without .env read `http://127.0.0.1:/v1/models` and called a healthy engine unreachable.
        ports.update({k: v for k, v in values.items() if k.endswith("_PORT") and v})
    bucket = next((s["bucket"] for s in svc.values() if s.get("bucket")), None)
    running = {n for n, s in svc.items() if s["state"] == "running"}
    st = {
        "project": project,
        "at": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "services": svc,
        "tunnel": handoff(project),
        "engine": engine_level(
            ports.get("ENGINE_PORT", DEFAULT_PORTS["ENGINE_PORT"]),
            accepted_for=settings["engine"].get(UNPROVEN_OK, ""),
            proven=engine_proven(ids["engine"]),
        )
        if "engine" in running
        else {"capture_level": "not running"},
        "env_server": env_server(ports.get("ENV_SERVER_PORT", DEFAULT_PORTS["ENV_SERVER_PORT"]))
        if "env-server" in running
        else {"error": "not running"},
        "training": training(bucket),
        "gpus": gpus(),
    }
    if "engine" in running:
        st["engine"]["template"] = engine_template(ids["engine"])
        st["engine"]["metrics"] = engine_metrics(ports.get("ENGINE_PORT", DEFAULT_PORTS["ENGINE_PORT"]))
    if "tunnel" in running:
        st["tunnel"]["edge_connections"] = edge_connections(
            ports.get("TUNNEL_METRICS_PORT", DEFAULT_PORTS["TUNNEL_METRICS_PORT"])
        )
    if st["services"]:
        st["verdict"] = verdict(
            st["training"],
            st["engine"].get("metrics") or {},
            (bool(st["tunnel"].get("trusted")), st["tunnel"].get("untrusted_reason") or ""),
            st["tunnel"].get("edge_connections"),
            st["env_server"].get("inflight", "?"),
            trainer=(svc.get("trainer") or {}).get("state"),
        )
    return st


def ago(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = float(seconds)
    return (
        f"{seconds:.0f} s ago"
        if seconds < 120
        else f"{seconds / 60:.0f} min ago"
        if seconds < 7200
        else f"{seconds / 3600:.1f} h ago"
    )


def human(st: dict) -> str:
    lines = [f"{st['project']} — {st['at']}", "", "services"]
    if not st["services"]:
        lines.append("  (none: the stack is not up — `docker compose up` or scripts/cpu-up)")
    for name in SERVICES + sorted(set(st["services"]) - set(SERVICES)):
        s = st["services"].get(name)
        if s is None:
            lines.append(f"  {name:<13} -")
            continue
        lines += service_lines(name, s, st["training"].get("state"))
    t = st["tunnel"]
    edge = "" if t.get("edge_connections") is None else f", {t['edge_connections']:.0f} edge connections"
    if t.get("state") == "verified" and not t.get("trusted"):
        lines.append(f"\ntunnel      {t['url']}  NOT TRUSTED: {t.get('untrusted_reason')}{edge}")
    elif t.get("state") == "verified":
        lines.append(
            f"\ntunnel      {t['url']}  verified {ago(t.get('verified_ago_s'))} via {t.get('provider')}"
            f" (published {ago(t.get('published_ago_s'))}, proxy instance {t.get('instance', '?')[:8]}){edge}"
        )
    elif t.get("state") == "withdrawn":
        lines.append(
            f"\ntunnel      WITHDRAWN {ago(t.get('withdrawn_ago_s'))}: {t.get('reason')} — rollouts are refused"
        )
    elif t.get("untrusted_reason"):
        lines.append(f"\ntunnel      NO URL: {t['untrusted_reason']} — rollouts are refused")
    else:
        lines.append(f"\ntunnel      {t.get('state')}")
    e = st["engine"]
    lines.append(f"engine      capture level: {e['capture_level']}" + (f" — {e['detail']}" if e.get("detail") else ""))
    if e.get("template"):
        lines.append(f"            {e['template']}")
    if e.get("metrics"):
        m = e["metrics"]
        lines.append(f"            {m['error'] if m.get('error') else figures.describe_engine(m)}")
    es = st["env_server"]
    if "error" in es:
        lines.append(f"sandboxes   env server {es['error']}")
    else:
        lines.append(
            f"sandboxes   {es.get('inflight', 0)} in flight"
            + (f": {', '.join(es.get('labels', [])[:4])}" if es.get("labels") else "")
        )
    tr = st["training"]
    if "missing" in tr:
        lines.append(f"training    {tr['missing']}")
    else:
        lines.append(
            f"training    run {tr.get('run_name', Path(tr['run_dir']).name)} ({tr.get('state', '?')})  step {tr.get('step')}/{tr.get('max_steps', '?')}"
            f"  reward {_f(tr.get('reward_mean'))} ± {_f(tr.get('reward_std'))}"
            f"  zero-spread groups {_pct(tr.get('zero_spread_frac'))}"
            f"  samples/rollout {_f(tr.get('samples_per_rollout'))} vs turns {_f(tr.get('turns_mean'))}"
        )
        lines.append(f"            {figures.forking(tr)}")
        lines.append(f"            {figures.mismatch(tr)}")
        lines.append(
            f"            unscorable {_pct(tr.get('unscorable_frac'))}  timeouts {_pct(tr.get('timeout_frac'))}"
            f"  samples dropped over TOKEN_BUDGET {tr.get('dropped_oversize_total') or 0}  {figures.stale(tr)}"
            + (f"  ERROR: {tr['error']}" if tr.get("error") else "")
        )
        lines.append(
            f"            last checkpoint {tr.get('last_checkpoint') or 'none yet'}"
            + (f", {ago(tr.get('last_checkpoint_age_s'))}" if tr.get("last_checkpoint") else "")
            + f"  on {tr['bucket']}; status updated {ago(tr.get('updated_ago_s'))}"
        )
        lines += eval_and_hub_lines(tr)
    if st["gpus"]:
        lines.append(
            "gpus        "
            + "  ".join(f"{g['index']}: {g['used_mib'] / 1024:.1f}/{g['total_mib'] / 1024:.0f} GiB" for g in st["gpus"])
        )
    if st.get("verdict"):
        lines.append(f"\n{st['verdict']}")
    return "\n".join(lines)


def service_lines(name: str, s: dict, run_state: str | None) -> list[str]:
    """A service's row, and under it why its healthcheck fails. Health only for a running container: Docker
    keeps the last health status and probe output of an exited one, so a trainer that finished cleanly
    read `exited (exit 0) unhealthy` (its healthcheck failed once the run's status stopped moving)."""
    state = s["state"]
    if state == "exited" and s["exit_code"] == 0 and name in RUN_TO_COMPLETION:
        # The trainer also exits 0 when SIGTERM stopped it after saving: its status file tells the two apart.
        state = "stopped" if name == "trainer" and run_state in ("stopped", "stopped-by-rule") else "finished"
    if s["exit_code"] is not None:
        state += f" (exit {s['exit_code']})"
    health = (s["health"] or "") if s["state"] == "running" else ""
    lines = [f"  {name:<13} {state:<17} {health}".rstrip()]
    if health == "unhealthy" and s["last_health_output"]:
        lines.append(f"  {'':<13} └ {s['last_health_output'].splitlines()[-1]}")
    return lines


def _eval(doc: dict | None) -> str:
    if not doc or doc.get("pass_at_1") is None:
        return "none"
    return (
        f"pass@1 {_pct(doc['pass_at_1'])} [{_pct(doc.get('ci_low'))}, {_pct(doc.get('ci_high'))}]"
        f" ({doc.get('label')}, {doc.get('scored_attempts')}/{doc.get('attempts')} scored)"
    )


def eval_and_hub_lines(tr: dict) -> list[str]:
    """Evaluation (baseline and latest periodic) and Hub publishing, from status.json (trainer/evaluation/eval_callback.py,
    trainer/hub/publish.py); nothing when neither is configured."""
    lines = []
    if tr.get("eval") or tr.get("eval_baseline") or tr.get("eval_state"):
        lines.append(
            f"eval        baseline {_eval(tr.get('eval_baseline'))}  ->  latest {_eval(tr.get('eval'))}"
            + (f"  ({tr['eval_state']})" if tr.get("eval_state") else "")
        )
    hub = tr.get("hub")
    if hub:
        line = f"hub         {hub.get('repo')}: {hub.get('state')}"
        if hub.get("pushed"):
            line += f", pushed {', '.join(hub['pushed'][-3:])}"
        if hub.get("state") in ("retrying", "failed") and hub.get("last_error"):
            line += f"  PUSH FAILED (attempt {hub.get('attempt')}): {hub['last_error']}"
            if hub.get("fix"):
                line += f"; {hub['fix']}"
        lines.append(line)
    return lines


def _f(x) -> str:
    return "?" if x is None else f"{float(x):.2f}"


def _pct(x) -> str:
    return "?" if x is None else f"{100 * float(x):.0f}%"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--project", default=os.environ.get("COMPOSE_PROJECT_NAME", "asyncgrpo-harbor"))
    args = parser.parse_args()
    if not shutil.which("docker"):
        print("docker is not installed here", file=sys.stderr)
        return 2
    st = collect(args.project)
    print(json.dumps(st, indent=2) if args.json else human(st))
    return 0


if __name__ == "__main__":
    sys.exit(main())
