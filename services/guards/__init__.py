"""Preflight guards: every way a paid run can fail before its first useful step, checked before any
GPU time is spent.

`python -m guards` (the compose `preflight` service) runs them all and reports every failure at once,
one line each, each line naming its fix: an operator who fixes one problem per restart pays for a
restart per problem. The trainer runs the same checks before it loads a model, minus `PREFLIGHT_ONLY`
(checks.py): the free ports (by then the engine and env server hold them) and the sandbox credentials
(the env server holds those, not the trainer).
"""

from .checks import Failure, run_all

__all__ = ["Failure", "run_all"]
