"""tunnel_standin."""
