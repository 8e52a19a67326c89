"""`llmtop serve`: right-size vLLM from the model and the memory, and run it behind the gateway."""
