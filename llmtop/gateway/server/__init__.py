"""The running gateway: Starlette app, proxy, admin API, metrics, the lifespan's loops."""
