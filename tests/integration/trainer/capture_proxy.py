"""OpenEnv's capture proxy app (`create_app`), served on loopback: python capture_proxy.py LLM_URL MODEL PORT [ENGINE]

ENGINE is what the proxy's /health reports the upstream to be (`mock` by default; the GPU check passes `vllm`).
"""

import sys

import uvicorn
from openenv.core.harness.capture.server import create_app

if __name__ == "__main__":
    llm_url, model, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    engine = sys.argv[4] if len(sys.argv) > 4 else "mock"
    app = create_app(llm_url=llm_url, model=model, engine=engine, max_output_tokens=256)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
