"""env_server: OpenEnv's harbor server in its own container (Task API + MCP, capture proxy on loopback,
the capture proxy advertised at the URL tunnel-check verified). Entry point: `python -m env_server`."""
