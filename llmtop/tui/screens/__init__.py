"""llmtop.tui.screens."""
