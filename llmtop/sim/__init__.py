"""A vLLM-compatible simulated engine: scheduler model, metrics and OpenAI API."""
