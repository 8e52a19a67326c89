"""The demo: scenarios (`scenarios`), the stack of sim + gateway + load (`stack`), and the headless
timeline (`headless`). The TUI side of `llmtop demo` lives in llmtop.tui; this package never
imports textual."""
