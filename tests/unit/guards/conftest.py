import sys
from pathlib import Path

# test_run_settings.py reuses test_checks.py's environment and mountinfo builders; importlib mode does
# not put the test folder on the path.
sys.path.insert(0, str(Path(__file__).parent))
