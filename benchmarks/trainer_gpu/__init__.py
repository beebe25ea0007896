"""Benchmark of TRL AsyncGRPO's loss step on mini-swe-agent-shaped rollouts (scripts/bench-trainer-gpu)."""
