"""The Textual TUI; the only package that imports textual."""
