"""env_server."""
