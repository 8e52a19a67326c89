"""Admission control (being built)."""
