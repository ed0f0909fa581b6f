"""leader_notify package."""
