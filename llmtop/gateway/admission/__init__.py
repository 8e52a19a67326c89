"""Admission: who may start now, who waits, who is refused; pure, on an injected clock."""
