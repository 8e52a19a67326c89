"""IO that feeds the core: vLLM /metrics, the gateway's admin API, GPUs, recordings."""
