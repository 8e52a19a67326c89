"""Recordings: every poll's raw inputs as compact JSON lines, gzip-compressed for a ``.gz`` name.

Raw inputs, so replay re-runs today's rules; samples delta-encoded (a keyframe every
`KEYFRAME_EVERY` polls: the encoding is llmtop.core.record.encode's), each line flushed, secrets
redacted. Format and API: docs/recording.md.
"""

from __future__ import annotations

import gzip
import io
import json
import re
import time
import zlib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from llmtop.core.base.raw import RawPoll
from llmtop.core.record.encode import (
    KEYFRAME_EVERY,
    REDACTED,
    Encoder,
    header,
    redact,
    scrub,
)
from llmtop.errors import RecordingError

if TYPE_CHECKING:
    from llmtop.core.base.snapshot import Finding, Snapshot
    from llmtop.core.record.decode import Recording
    from llmtop.settings import MonitorSettings

__all__ = [
    "KEYFRAME_EVERY",
    "REDACTED",
    "Encoder",
    "Recorder",
    "RecordingSource",
    "header",
    "redact",
    "save_recording",
    "scrub",
]

# ---- writing ----------------------------------------------------------------------------------


class Recorder:
    """Appends polls to a recording file; `toggle` is the TUI's `r` key. Not thread-safe."""

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        interval_s: float = 1.0,
        targets: Mapping[str, Any] | None = None,
        secrets: Iterable[str | None] = (),
        keyframe_every: int = KEYFRAME_EVERY,
    ) -> None:
        self.path: Path | None = Path(path) if path is not None else None
        self.interval_s = interval_s
        self.targets = dict(targets or {})
        self._secrets = tuple(s for s in secrets if s)
        self._keyframe_every = keyframe_every
        self._file: gzip.GzipFile | io.BufferedWriter | None = None
        self._encoder = Encoder(keyframe_every)
        self.polls_written = 0
        """Polls written since the last open."""
        self.error: str | None = None
        """Why the last write failed (recording stopped), if it did."""

    @classmethod
    def from_settings(cls, monitor: MonitorSettings) -> Recorder:
        """A recorder for a monitoring run: its targets, interval and admin token (redacted)."""
        return cls(
            monitor.record,
            interval_s=monitor.interval_s,
            targets={
                "vllm": [] if monitor.prometheus_url else list(monitor.vllm_urls),
                "prometheus": monitor.prometheus_url,
                "gateway": monitor.gateway_url,
                "dcgm": monitor.dcgm_url,
            },
            secrets=(monitor.admin_token,),
        )

    @property
    def recording(self) -> bool:
        """True while polls are being written."""
        return self._file is not None

    def open(self, path: str | Path | None = None) -> Path:
        """Start appending to `path` (or the recorder's path, or a timestamped default)."""
        self.close()
        if path is not None:
            self.path = Path(path)
        if self.path is None:
            self.path = Path(time.strftime("llmtop-%Y%m%d-%H%M%S.jsonl.gz"))
        try:
            if self.path.suffix == ".gz":
                self._file = gzip.open(self.path, "ab", compresslevel=6)  # noqa: SIM115 (kept open)
            else:
                self._file = self.path.open("ab")
                if self.path.stat().st_size and not _ends_with_newline(self.path):
                    self._file.write(b"\n")
        except OSError as e:
            self._file = None
            raise RecordingError(f"cannot record to {self.path}: {e.strerror or e}") from None
        self._encoder = Encoder(self._keyframe_every)
        self.polls_written = 0
        self._write_line(header(self.interval_s, self.targets, time.time()))
        return self.path

    def write(self, raw: RawPoll | None, findings: Iterable[Finding] = ()) -> None:
        """Append one poll; a no-op while not recording or before the first poll (raw None)."""
        if self._file is None or raw is None:
            return
        self._write_line(self._encoder.encode(raw, findings))
        self.polls_written += 1

    def toggle(self) -> bool:
        """Start or stop recording; returns True when now recording."""
        if self.recording:
            self.close()
            return False
        self.open()
        return True

    def close(self) -> None:
        """Finish the file (gzip trailer included); safe to call twice."""
        f, self._file = self._file, None
        if f is not None:
            try:
                f.close()
            except OSError as e:
                raise RecordingError(f"cannot finish {self.path}: {e.strerror or e}") from None

    def _write_line(self, line: dict[str, Any]) -> None:
        assert self._file is not None
        text = redact(json.dumps(line, separators=(",", ":")), self._secrets)
        try:
            self._file.write(text.encode() + b"\n")
            if isinstance(self._file, gzip.GzipFile):
                self._file.flush(zlib.Z_SYNC_FLUSH)
            else:
                self._file.flush()
        except OSError as e:
            self.close()
            raise RecordingError(f"cannot write {self.path}: {e.strerror or e}") from None


class _Collector(Protocol):
    last_raw: RawPoll | None

    async def poll(self) -> Snapshot: ...

    async def aclose(self) -> None: ...


class RecordingSource:
    """A Collector whose every poll also goes to a Recorder: the TUI's source under --record.

    A write that fails (disk full) stops the recording and is kept in `recorder.error`; the
    poll itself still succeeds, so monitoring goes on.
    """

    def __init__(self, collector: _Collector, recorder: Recorder) -> None:
        self.collector = collector
        self.recorder = recorder

    async def poll(self) -> Snapshot:
        """Poll the collector, then record its RawPoll and the findings shown."""
        snap = await self.collector.poll()
        try:
            self.recorder.write(self.collector.last_raw, snap.findings)
        except RecordingError as e:
            self.recorder.error = str(e)
        return snap

    async def aclose(self) -> None:
        """Close the collector and finish the recording file."""
        try:
            await self.collector.aclose()
        finally:
            self.recorder.close()


def _ends_with_newline(path: Path) -> bool:
    with path.open("rb") as f:
        f.seek(-1, 2)
        return f.read(1) == b"\n"


def save_recording(recording: Recording, folder: str | Path, name: str) -> Path:
    """Write a recording held in memory (a gateway's history, Prometheus' range) as a file in
    `folder` named after `name`, for what reads files (the replay TUI); each decode start
    begins a segment, so every poll reads back as it was."""
    stem = re.sub(r"[^A-Za-z0-9.]+", "-", name.split("://", 1)[-1]).strip("-") or "recording"
    path = Path(folder) / f"{stem}.jsonl.gz"
    head = json.dumps(recording.header, separators=(",", ":")).encode() + b"\n"
    starts = set(recording.keyframes)
    try:
        with gzip.open(path, "wb", compresslevel=6) as f:
            for i, line in enumerate(recording.lines):
                if i in starts:
                    f.write(head)
                f.write(line.rstrip(b"\n") + b"\n")
            if not recording.lines:
                f.write(head)
    except OSError as e:
        raise RecordingError(f"cannot write {path}: {e.strerror or e}") from None
    return path
