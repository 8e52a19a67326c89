"""Windows of scrapes -> rates, quantiles and the figures of `EngineStats`."""
