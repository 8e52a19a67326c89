"""Recordings: the writer (`writer`), the reader (`reader`), the replay source (`replay`), the
postmortem report (`report`, pure) and its charts (`charts`)."""
