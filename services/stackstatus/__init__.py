"""What `scripts/status` concludes from what it reads: Prometheus figures of the engine and the tunnel,
whether the capture URL is still trusted, and the one verdict line. Stdlib only (runs on the host)."""
