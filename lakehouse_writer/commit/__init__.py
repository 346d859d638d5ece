"""Exactly once: the writer's state, the commits and the system tables."""
