"""Watching the run: stop on SIGTERM or a stop rule, the engine gone, status.json and the healthcheck."""
