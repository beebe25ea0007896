"""tunnel_check."""
