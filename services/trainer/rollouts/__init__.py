"""Rollouts: the session factory TRL's worker calls, one rollout's session, its reward and measurements."""
