"""RawPoll -> Snapshot, for one engine or a fleet, and over a window of polls."""
