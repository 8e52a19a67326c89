"""GPU readings: NVML for local GPUs, dcgm-exporter for remote ones."""
