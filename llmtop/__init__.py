"""llmtop: see, name and fix "200 OK but degraded" on self-hosted LLM inference."""

__version__ = "0.1.0"
