"""Pure logic: parsing, rates, quantiles, health rules. No IO, no clock, no UI.

In homes that stack one way (ARCHITECTURE.md, "core/ in homes"); each package `__init__` is
a docstring only, so importing one module costs only what it imports.
"""
