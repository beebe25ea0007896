"""Facts every service shares, written once: environment readers, allowed values and defaults, the
tunnel hand-off, the atomic JSON write, the mountinfo parser, each service's settings reader (readers/), and
the rules any engine serving the policy follows with the probe that grades it (serving/).

Standard library only, because every image carries it (including the engine's, where nothing else of
ours is installed) and `scripts/status` imports it from the host's system Python.
"""
