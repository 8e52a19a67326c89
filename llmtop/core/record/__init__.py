"""The recording format: a RawPoll as a JSON line (delta + keyframes) and back; a `Recording`
read from bytes. Files and sockets are the callers'."""
