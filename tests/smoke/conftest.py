import sys
from pathlib import Path

# The smoke suite's driver (compose_stack.py; not `stack`, the shared package's name) sits next to the tests; importlib mode does not put it on the path.
sys.path.insert(0, str(Path(__file__).parent))

from compose_stack import pytest_runtest_makereport  # noqa: E402, F401 -- the hook, registered here
