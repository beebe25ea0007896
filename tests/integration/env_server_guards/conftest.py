"""Run inside the env-server image (OpenEnv, uvicorn, this checkout's services/ on PYTHONPATH):
tests/run-in-image env-server tests/integration/env_server_guards
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
