import sys
from pathlib import Path

import pytest

# The smoke suite's driver (compose_stack.py; not `stack`, the shared package's name) sits next to the tests; importlib mode does not put it on the path.
sys.path.insert(0, str(Path(__file__).parent))


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Attach each phase's outcome to the test item, so fixtures can print diagnostics on failure."""
    outcome = yield
    setattr(item, "rep_" + outcome.get_result().when, outcome.get_result())
