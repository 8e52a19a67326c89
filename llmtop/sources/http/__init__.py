"""The HTTP clients llmtop reads its targets with."""
