"""The findings: health rules as data, their thresholds, the KV sizing they share."""
