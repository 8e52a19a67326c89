"""The TUI's pure presentation: what each panel says, computed from a Snapshot; no textual."""
