"""The simulated engine model (being built)."""
