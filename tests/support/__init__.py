"""Test support shared by tests and bench: ground truths in virtual time, verification stacks."""
