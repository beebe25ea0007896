"""Serve the run's dashboard from the bucket, on loopback: the `dashboard` compose profile.

    docker compose --profile dashboard up -d dashboard
    ssh -N -L 7860:127.0.0.1:7860 <you>@<gpu-host>        then open http://localhost:7860

Follows REPORT_TO, as the trainer does: trackio's dashboard over `<bucket>/dashboards/trackio`, or
TensorBoard over `<bucket>/dashboards/tensorboard` (every run under the bucket, one run per folder).
W&B's dashboard is wandb.ai: nothing to serve here, and this says so. It binds DASHBOARD_HOST
(127.0.0.1) only: the dashboard shows prompts and completions, and the one public hop of this stack is
the capture proxy.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from stack import fields
from stack.env import Env, EnvError, Field, Table
from stack.readers.reporting import PROJECT, backend

from .reporting import log_dirs

FIELDS = Table(
    fields.REPORT_TO,
    fields.BUCKET_DIR,
    Field("DASHBOARD_HOST", "text", "127.0.0.1", "address the dashboard binds (it shows prompts: loopback)"),
    Field("DASHBOARD_PORT", "port", 7860, "port the `dashboard` profile serves on, on 127.0.0.1"),
)


def command(report_to: str, bucket_dir: Path, host: str, port: int) -> list[str] | None:
    """The process that serves this backend's dashboard, or None when nothing is served locally."""
    dirs = log_dirs(bucket_dir / "dashboards", run_name="")
    chosen = backend(report_to)
    if chosen == "tensorboard":
        logdir = str(Path(dirs["TENSORBOARD_LOGGING_DIR"]))
        return ["tensorboard", "--logdir", logdir, "--host", host, "--port", str(port), "--reload_interval", "15"]
    if chosen == "trackio":
        # trackio reads TRACKIO_DIR at import; a fresh interpreter gets it from the environment.
        code = (
            f"import trackio; trackio.show(project={PROJECT!r}, open_browser=False, block_thread=True, "
            f"host={host!r}, server_port={port})"
        )
        return [sys.executable, "-c", code]
    return None


def main() -> int:
    read = Env()
    try:
        report_to = read.get(FIELDS["REPORT_TO"])
        bucket_dir = Path(read.get(FIELDS["BUCKET_DIR"]))
        host, port = read.get(FIELDS["DASHBOARD_HOST"]), read.get(FIELDS["DASHBOARD_PORT"])
        argv = command(report_to, bucket_dir, host, port)
    except EnvError as exc:
        print(f"dashboard: {exc}", file=sys.stderr)
        return 1
    if argv is None:
        print(
            f"dashboard: REPORT_TO={report_to} keeps no dashboard on the bucket"
            + (" (W&B's is at https://wandb.ai)" if backend(report_to) == "wandb" else "")
            + "; set REPORT_TO=trackio or tensorboard to serve one here",
            file=sys.stderr,
        )
        return 1
    env = {**os.environ, "TRACKIO_DIR": log_dirs(bucket_dir / "dashboards", "")["TRACKIO_DIR"]}
    (bucket_dir / "dashboards").mkdir(parents=True, exist_ok=True)
    print(f"dashboard: {backend(report_to)} on http://{host}:{port} from {bucket_dir / 'dashboards'}", flush=True)
    os.execvpe(argv[0], argv, env)


if __name__ == "__main__":
    sys.exit(main())
