"""Benchmark: the mock engine's tokens/s, and what OpenEnv's capture proxy adds per call.

Starts the mock engine (a subprocess, as in production) and OpenEnv's real capture app
(`openenv.core.harness.capture.server.create_app`) under uvicorn on 127.0.0.1, mints a capture session,
then sends the same requests (same seeds) once directly and once through the proxy, interleaved so
drift in host load hits both alike. Run through scripts/bench-mock-engine.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import threading
import time

import requests


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(url: str, deadline_s: float, proc: subprocess.Popen | None = None) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if proc is not None and proc.poll() is not None:
            sys.exit(f"bench: {url} process exited with {proc.returncode}")
        try:
            if requests.get(url, timeout=2).ok:
                return
        except requests.RequestException:
            pass
        time.sleep(0.2)
    sys.exit(f"bench: {url} did not come up within {deadline_s:.0f}s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="mock engine tokens/s and capture-proxy overhead")
    parser.add_argument("--requests", type=int, default=20, help="requests per path (default 20)")
    parser.add_argument("--max-tokens", type=int, default=64, help="max_tokens per request (default 64)")
    parser.add_argument("--model-dir", default=os.environ.get("MOCK_MODEL_DIR", "/app/models/tiny-agent"))
    args = parser.parse_args(argv)

    import uvicorn
    from openenv.core.harness.capture.server import create_app

    served = "tiny-agent"
    engine_port, proxy_port = _free_port(), _free_port()
    env = {
        **os.environ,
        "ENGINE_HOST": "127.0.0.1",
        "ENGINE_PORT": str(engine_port),
        "MODEL": served,
        "MOCK_MODEL_DIR": args.model_dir,
        "MOCK_MAX_NEW_TOKENS": str(args.max_tokens),
        "MOCK_FAULTS": "",
        "MOCK_SCRIPT_FILE": "",
    }
    engine = subprocess.Popen([sys.executable, "-m", "mock_engine"], env=env)
    try:
        engine_url = f"http://127.0.0.1:{engine_port}"
        _wait(f"{engine_url}/health", 180, engine)
        app = create_app(llm_url=f"{engine_url}/v1", model=served, max_output_tokens=args.max_tokens)
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=proxy_port, log_level="warning"))
        threading.Thread(target=server.run, daemon=True).start()
        proxy_url = f"http://127.0.0.1:{proxy_port}"
        _wait(f"{proxy_url}/health", 60)
        session = app.state.registry.create(capture_level="tokens")

        def call(base: str, seed: int, key: str | None) -> tuple[float, int]:
            body = {
                "model": served,
                "messages": [{"role": "user", "content": f"Task {seed}: list the files."}],
                "max_tokens": args.max_tokens,
                "temperature": 1.0,
                "seed": seed,
                "logprobs": True,
                "return_token_ids": True,
            }
            headers = {"Authorization": f"Bearer {key}"} if key else {}
            t0 = time.perf_counter()
            resp = requests.post(f"{base}/v1/chat/completions", json=body, headers=headers, timeout=300)
            elapsed = time.perf_counter() - t0
            if resp.status_code != 200:
                sys.exit(f"bench: {base} answered HTTP {resp.status_code}: {resp.text[:300]}")
            return elapsed, resp.json()["usage"]["completion_tokens"]

        call(engine_url, 0, None)  # warm both paths (first-call allocations), not measured
        call(proxy_url, 0, session.session_id)
        direct, proxied, tokens = [], [], 0
        for i in range(1, args.requests + 1):
            d, n = call(engine_url, i, None)
            p, n_proxy = call(proxy_url, i, session.session_id)
            if n != n_proxy:
                sys.exit(f"bench: seed {i} gave {n} tokens direct but {n_proxy} through the proxy")
            direct.append(d)
            proxied.append(p)
            tokens += n
        server.should_exit = True
    finally:
        engine.terminate()
        engine.wait(timeout=30)

    mean_d, mean_p = statistics.mean(direct), statistics.mean(proxied)
    added = [p - d for p, d in zip(proxied, direct)]
    print(f"requests per path:      {args.requests} (same seeds, interleaved), max_tokens {args.max_tokens}")
    print(
        f"mock engine:            {tokens / sum(direct):.1f} tokens/s ({tokens} tokens, mean {tokens / args.requests:.1f}/call)"
    )
    print(f"latency direct:         mean {mean_d * 1000:.1f} ms, median {statistics.median(direct) * 1000:.1f} ms")
    print(f"latency through proxy:  mean {mean_p * 1000:.1f} ms, median {statistics.median(proxied) * 1000:.1f} ms")
    print(
        f"capture proxy adds:     {statistics.mean(added) * 1000:.1f} ms/call mean, "
        f"{statistics.median(added) * 1000:.1f} ms median; ratio proxied/direct {mean_p / mean_d:.2f}x"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
