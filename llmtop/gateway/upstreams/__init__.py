"""Where a request goes (the balancer) and the limits several gateways share (Redis)."""
