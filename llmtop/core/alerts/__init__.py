"""llmtop's findings as Prometheus rules: the figures as recording rules and every finding
PromQL can express as an alerting rule, made from the health rules' own rows and thresholds
(`spec` the inputs, `figures` the recording rules, `engine` and `edge` the alerts, `rulesfile`
the file). Pure: text in, text out.
"""
