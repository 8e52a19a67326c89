"""Engines other than vLLM, each a dialect mapped onto vLLM's names: detected from the exposition,
read through the same plans, what it lacks said with why (`catalog`)."""
