"""Reading recording files: the bytes of a file into a `Recording` (llmtop.core.record.decode,
where the format is read; a gateway's history answer goes through the same
`read_recording_bytes`).
"""

from __future__ import annotations

from pathlib import Path

from llmtop.core.record.decode import Recording, read_recording_bytes
from llmtop.core.record.encode import FORMAT_VERSION
from llmtop.errors import RecordingError

__all__ = ["FORMAT_VERSION", "Recording", "read_recording", "read_recording_bytes"]


def _file_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise RecordingError(f"recording not found: {path}") from None
    except OSError as e:
        raise RecordingError(f"cannot read {path}: {e.strerror or e}") from None


def read_recording(path: str | Path) -> Recording:
    """Read and check a recording; RecordingError when it is missing, not one, or corrupt.

    A truncated tail (a killed writer) is kept up to the last whole line, with a warning.
    """
    p = Path(path)
    return read_recording_bytes(_file_bytes(p), name=str(p))
