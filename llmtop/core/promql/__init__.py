"""The fleet through Prometheus: PromQL queries and their answers -> figures."""
