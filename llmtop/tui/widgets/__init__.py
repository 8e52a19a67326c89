"""llmtop.tui.widgets."""
