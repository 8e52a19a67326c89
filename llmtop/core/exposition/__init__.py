"""Prometheus exposition text -> samples, and narrow scrapes (asking for only some)."""
