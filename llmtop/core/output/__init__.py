"""What llmtop prints from Snapshots: snapshot's JSON and summary, the incident timeline."""
