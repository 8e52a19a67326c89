"""The findings, one module per family, each finding defined once (`definition`): its check,
class, thresholds, words and Prometheus alert; `catalog` collects them in a stated order."""
