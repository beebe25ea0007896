import sys
from pathlib import Path

# The compose driver is the smoke test's (tests/smoke/compose_stack.py), reused, not copied; importlib mode
# does not put either folder on the path.
sys.path.insert(0, str(Path(__file__).parents[1] / "smoke"))

from compose_stack import pytest_runtest_makereport  # noqa: E402, F401 -- the hook, registered here
