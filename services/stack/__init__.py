"""Facts every service shares, written once: environment readers, allowed values and defaults, the
tunnel hand-off, the atomic JSON write, the mountinfo parser.

Standard library only, because every image carries it (including the engine's, where nothing else of
ours is installed) and `scripts/status` imports it from the host's system Python.
"""
