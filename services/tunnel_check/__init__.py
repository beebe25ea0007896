"""tunnel-check: proves the public URL serves THIS capture proxy, hands it over, keeps re-checking.

Entry points: `python -m tunnel_check` (the monitor) and `python -m tunnel_check.health` (the
container healthcheck). See monitor.py for the loop and stack/readers/tunnel_check.py for the bounds it guarantees.
"""
