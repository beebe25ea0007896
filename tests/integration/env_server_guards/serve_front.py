"""env-server's capture proxy exactly as it serves it, alone in a process whose RSS the test measures:
OpenEnv's capture app (built by OpenEnv's HarborService) behind our bind, front layer and frozen fixes.

    python serve_front.py ENGINE_URL CAPTURE_PORT HANDOFF_DIR MAX_BODY_MB MAX_CONCURRENT [TIMING_JSON]

TIMING_JSON overrides the connection and body guards' defaults (header_timeout_s, body_timeout_s,
max_connections), so a test sees a deadline fire in seconds.
"""

import json
import logging
import sys
import time

from env_server.capture import LoopbackHarborService

MAX_OUTPUT_TOKENS = 256

if __name__ == "__main__":
    # As env-server's own main: warnings and above, one line each.
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    engine_url, port, handoff_dir, body_mb, concurrent = sys.argv[1:6]
    timing = json.loads(sys.argv[6]) if len(sys.argv) > 6 else {}
    service = LoopbackHarborService(
        capture_host="127.0.0.1",
        handoff_dir=handoff_dir,
        llm_url=engine_url,
        model="m",
        datasets=[],
        capture_port=int(port),
        capture_level="tokens",
        max_output_tokens=MAX_OUTPUT_TOKENS,
        max_body_bytes=int(body_mb) * 1024 * 1024,
        max_concurrent=int(concurrent),
        **timing,
    )
    print("serving", service.start(), "instance", service.instance_id, flush=True)
    while True:
        time.sleep(3600)
