"""vLLM's metric names and layouts, and one scrape's samples -> an `EngineScrape`."""
