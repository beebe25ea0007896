"""What `scripts/status` concludes from what it reads: Prometheus figures of the engine and the tunnel,
and the one verdict line (whether the URL is trusted is stack.handoff.lookup's answer). Stdlib only."""
