"""Running ASGI apps (the sim, the gateway) on uvicorn: `uvicorn_runner`."""
