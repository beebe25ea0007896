import sys
from pathlib import Path

import pytest

# The compose driver is the smoke test's (tests/smoke/compose_stack.py), reused, not copied; importlib mode
# does not put either folder on the path.
sys.path.insert(0, str(Path(__file__).parents[1] / "smoke"))


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Attach each phase's outcome to the test item, so the fixture can print diagnostics on failure."""
    outcome = yield
    setattr(item, "rep_" + outcome.get_result().when, outcome.get_result())
