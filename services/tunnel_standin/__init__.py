"""tunnel_standin: the CPU form's cloudflared. Announces a URL the way cloudflared does, forwards to
the capture proxy, and fails on request (see server.py). Never used in production."""
