"""The autopilot: moves the admission budgets from the engine's signals; pure."""
