"""Recordings: every poll's raw inputs as compact JSON lines, gzip-compressed for a ``.gz`` name.

A recording keeps what llmtop *read* (a `RawPoll` per poll: the filtered samples, the gateway's
stats, GPU readings, limit changes) and, for reference, the findings the live run showed. Replay
and report feed the polls to a fresh `Pipeline`, so an improved rule re-runs over an old incident.

Format (version 1), one JSON object per line::

    {"llmtop_recording": 1, "version": "0.1.0", "started": 1764400000.0,
     "interval_s": 1.0, "targets": {"vllm": [...], "gateway": "...", "dcgm": null}}
    {"time": ..., "kf": 1, "engines": [{"url": ..., "samples": [[name, {labels}, value], ...]}],
     "gateway": {...}, "gpus": [...], "events": [...], "findings": [...]}
    {"time": ..., "engines": [{"url": ..., "delta": [[index, value], ...]}], ...}

Samples are delta-encoded per engine against that engine's previous poll (only changed values,
by index), with a keyframe (``"kf": 1``, full samples) every `KEYFRAME_EVERY` polls, so a seek
decodes at most that many lines. An engine whose series set changed is written in full. A new
header line starts a new segment (appending to an existing file). The gzip stream is flushed
after every line, so a killed process leaves a file readable up to its last poll.

Secrets are never written: the admin token (and any value in `secrets`) is redacted from each
line's bytes, keys that name credentials are dropped, and user:password@ is cut from URLs.

Writing, from the TUI, `llmtop --record` or `llmtop demo --headless --record`::

    recorder = Recorder.from_settings(monitor_settings)   # path = settings.record (may be None)
    recorder.open()                 # or open(path); appends; RecordingError when it cannot
    recorder.write(raw, findings)   # after each poll: collector.last_raw, snapshot.findings
    recorder.toggle()               # the `r` key: stop, or start (default name when no path)
    recorder.close()

or wrap the Collector, as `llmtop top` does: ``RecordingSource(collector, recorder)`` is a
SnapshotSource that records `collector.last_raw` and the findings after every poll.

Reading: ``recording = read_recording(path)``; ``recording.raw(i)``, ``iter(recording)``,
``recording.times``, ``recording.warnings`` (a truncated tail is tolerated and counted there).
"""

from __future__ import annotations

import bisect
import dataclasses
import gzip
import io
import json
import math
import re
import time
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from llmtop import __version__
from llmtop.core.raw import RawPoll, Sample
from llmtop.errors import RecordingError

if TYPE_CHECKING:
    from llmtop.core.snapshot import Finding, Snapshot
    from llmtop.settings import MonitorSettings

FORMAT_VERSION = 1
KEYFRAME_EVERY = 60
"""Polls between keyframes: a minute at the default 1 s refresh."""
REDACTED = "[redacted]"
_SECRET_KEY = re.compile(
    r"(^|[_-])(token|authorization|api[_-]?key|secret|password|passwd|cookie)$", re.I
)
"""Keys dropped from the gateway's JSON and events (not `prompt_tokens`: whole words only)."""
_USERINFO = re.compile(r"(?<=://)[^/@\s]+@")
_GZIP_MAGIC = b"\x1f\x8b"


# ---- pure helpers: scrubbing, encoding, decoding -------------------------------------------


def scrub(value: Any) -> Any:
    """A copy of JSON-like data without credential-named keys or user:password@ in URLs."""
    if isinstance(value, Mapping):
        return {str(k): scrub(v) for k, v in value.items() if not _SECRET_KEY.search(str(k))}
    if isinstance(value, list | tuple):
        return [scrub(v) for v in value]
    if isinstance(value, str):
        return _USERINFO.sub("", value)
    return value


def _finding_dict(f: Finding) -> dict[str, Any]:
    return {
        "id": f.id,
        "severity": f.severity,
        "bottleneck": f.bottleneck,
        "summary": f.summary,
        "since": f.since,
    }


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


class Encoder:
    """RawPoll -> one recording line (a dict), delta-encoding samples against the last poll."""

    def __init__(self, keyframe_every: int = KEYFRAME_EVERY) -> None:
        self.keyframe_every = max(1, keyframe_every)
        self._count = 0
        self._prev: dict[str, tuple[Sample, ...]] = {}

    def encode(self, raw: RawPoll, findings: Iterable[Finding] = ()) -> dict[str, Any]:
        """The line for `raw`; every `keyframe_every`-th line (the first included) is full."""
        keyframe = self._count % self.keyframe_every == 0
        self._count += 1
        if keyframe:
            self._prev = {}
        d = raw.to_dict()
        samples_of = [e.pop("samples") for e in d["engines"]]
        d = scrub(d)  # samples are names and numbers only; their labels stay as scraped
        for e_dict, samples in zip(d["engines"], samples_of, strict=True):
            e_dict["samples"] = samples
        for e_dict, engine in zip(d["engines"], raw.engines, strict=True):
            samples = engine.samples
            prev = self._prev.get(engine.url)
            if samples is None:
                self._prev.pop(engine.url, None)
                continue
            self._prev[engine.url] = samples
            if prev is not None and len(prev) == len(samples):
                changed: list[list[float]] = []
                for i, (p, s) in enumerate(zip(prev, samples, strict=True)):
                    if p.name != s.name or p.labels != s.labels:
                        break
                    if not _same(p.value, s.value):
                        changed.append([i, s.value])
                else:
                    del e_dict["samples"]
                    e_dict["delta"] = changed
        line = {k: v for k, v in d.items() if v not in (None, [], {})}
        line["time"] = raw.time
        if keyframe:
            line["kf"] = 1
        found = [_finding_dict(f) for f in findings]
        if found:
            line["findings"] = found
        return line


def header(interval_s: float, targets: Mapping[str, Any], started: float) -> dict[str, Any]:
    """The first line of a recording segment (targets scrubbed of credentials)."""
    return {
        "llmtop_recording": FORMAT_VERSION,
        "version": __version__,
        "started": started,
        "interval_s": interval_s,
        "targets": scrub(dict(targets)),
    }


def redact(text: str, secrets: Iterable[str]) -> str:
    """`text` with every secret (plain or JSON-escaped) replaced by [redacted]."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, REDACTED)
            escaped = json.dumps(secret)[1:-1]
            if escaped != secret:
                text = text.replace(escaped, REDACTED)
    return text


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
        from llmtop.settings import read_token

        token = read_token(monitor.admin_token, monitor.admin_token_file)
        return cls(
            monitor.record,
            interval_s=monitor.interval_s,
            targets={
                "vllm": list(monitor.vllm_urls),
                "gateway": monitor.gateway_url,
                "dcgm": monitor.dcgm_url,
            },
            secrets=(token, monitor.admin_token),
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


# ---- reading ----------------------------------------------------------------------------------


@dataclass
class Recording:
    """A recording read into memory: its header, encoded poll lines and decoding cache."""

    path: str
    header: dict[str, Any]
    lines: list[dict[str, Any]]
    warnings: list[str] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    keyframes: list[int] = field(default_factory=list)
    """Indexes of lines that start a decode (keyframes and segment starts)."""
    _cache: tuple[int, dict[str, tuple[list[tuple[str, Any]], list[float]]]] | None = None

    def __len__(self) -> int:
        return len(self.lines)

    def __iter__(self) -> Iterator[RawPoll]:
        for i in range(len(self.lines)):
            yield self.raw(i)

    @property
    def start(self) -> float | None:
        """Time of the first poll (None when there is none)."""
        return self.times[0] if self.times else None

    @property
    def end(self) -> float | None:
        """Time of the last poll."""
        return self.times[-1] if self.times else None

    def index_at(self, t: float) -> int:
        """Index of the last poll at or before `t` (0 before the start)."""
        return max(0, bisect.bisect_right(self.times, t) - 1)

    def findings(self, i: int) -> list[dict[str, Any]]:
        """The findings the live run showed at poll `i` (for reference; replay recomputes)."""
        found: list[dict[str, Any]] = self.lines[i].get("findings", [])
        return found

    def raw(self, i: int) -> RawPoll:
        """The RawPoll of line `i`, decoded from the nearest keyframe (cached when sequential)."""
        if not 0 <= i < len(self.lines):
            raise IndexError(i)
        if (
            self._cache is not None
            and self._cache[0] <= i
            and (i < self._next_keyframe(self._cache[0]))
        ):
            start, state = self._cache[0] + 1, self._cache[1]
        else:
            start = self.keyframes[bisect.bisect_right(self.keyframes, i) - 1]
            state = {}
        for j in range(start, i + 1):
            _apply(self.lines[j], state, j + 2)
        self._cache = (i, state)
        return _to_raw(self.lines[i], state)

    def _next_keyframe(self, i: int) -> int:
        k = bisect.bisect_right(self.keyframes, i)
        return self.keyframes[k] if k < len(self.keyframes) else len(self.lines)


_State = dict[str, tuple[list[tuple[str, Any]], list[float]]]


def _apply(line: dict[str, Any], state: _State, lineno: int) -> None:
    """Advance the per-engine sample state by one line; RecordingError on a bad line."""
    if line.get("kf"):
        state.clear()
    try:
        for e in line.get("engines", []):
            url = str(e["url"])
            if "delta" in e:
                keys, values = state[url]
                values = list(values)
                for idx, value in e["delta"]:
                    values[int(idx)] = float(value)
                state[url] = (keys, values)
            elif e.get("samples") is not None:
                samples = e["samples"]
                keys = [
                    (str(n), tuple(sorted((str(k), str(v)) for k, v in lab.items())))
                    for n, lab, _ in samples
                ]
                state[url] = (keys, [float(v) for _, _, v in samples])
            else:
                state.pop(url, None)
    except (KeyError, IndexError, TypeError, ValueError, AttributeError):
        raise RecordingError(f"recording line {lineno}: bad engine samples") from None


def _to_raw(line: dict[str, Any], state: _State) -> RawPoll:
    entries = line.get("engines", [])
    bare = [{**e, "delta": None, "samples": None} for e in entries]
    raw = RawPoll.from_dict({**line, "engines": bare})
    engines = []
    for entry, e in zip(entries, raw.engines, strict=True):
        if "delta" in entry or entry.get("samples") is not None:
            keys, values = state[e.url]
            samples = tuple(Sample(n, lab, v) for (n, lab), v in zip(keys, values, strict=True))
            e = dataclasses.replace(e, samples=samples)
        engines.append(e)
    return dataclasses.replace(raw, engines=tuple(engines))


def _read_bytes(path: Path) -> tuple[bytes, str | None]:
    """The file's text bytes (gunzipped, every member) and why it stopped early, if it did."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise RecordingError(f"recording not found: {path}") from None
    except OSError as e:
        raise RecordingError(f"cannot read {path}: {e.strerror or e}") from None
    if not data.startswith(_GZIP_MAGIC):
        return data, None
    out: list[bytes] = []
    rest = data
    while rest:
        d = zlib.decompressobj(wbits=31)
        try:
            out.append(d.decompress(rest))
        except zlib.error:
            return b"".join(out), "compressed data is corrupt"
        if not d.eof:
            out.append(d.flush())
            return b"".join(out), "compressed stream ends early"
        rest = d.unused_data
    return b"".join(out), None


def read_recording(path: str | Path) -> Recording:
    """Read and check a recording; RecordingError when it is missing, not one, or corrupt.

    A truncated tail (a killed writer) is kept up to the last whole line, with a warning.
    """
    p = Path(path)
    data, cut = _read_bytes(p)
    raw_lines = data.split(b"\n")
    tail = raw_lines.pop()  # after the last newline: b"" unless the file was cut mid-line
    warnings: list[str] = []
    if tail.strip():
        cut = cut or "the last line is incomplete"
    head: dict[str, Any] | None = None
    lines: list[dict[str, Any]] = []
    keyframes: list[int] = []
    state: _State = {}
    new_segment = True
    for n, text in enumerate(raw_lines, start=1):
        if not text.strip():
            continue
        try:
            obj = json.loads(text)
        except ValueError:
            if head is None:
                raise RecordingError(f"{p} is not an llmtop recording") from None
            raise RecordingError(f"{p}: line {n} is not valid JSON") from None
        if not isinstance(obj, dict):
            raise RecordingError(f"{p}: line {n} is not a JSON object")
        if "llmtop_recording" in obj:
            if obj["llmtop_recording"] != FORMAT_VERSION:
                raise RecordingError(
                    f"{p}: recording format {obj['llmtop_recording']} is not supported"
                )
            head = head or obj
            new_segment = True
            continue
        if head is None:
            raise RecordingError(f"{p} is not an llmtop recording (no header line)")
        if not isinstance(obj.get("time"), int | float):
            raise RecordingError(f"{p}: line {n} has no time")
        if new_segment or obj.get("kf"):
            obj["kf"] = 1
            keyframes.append(len(lines))
            new_segment = False
        try:
            _apply(obj, state, n)
        except RecordingError as e:
            raise RecordingError(f"{p}: {e}") from None
        lines.append(obj)
    if head is None:
        why = "empty" if not data else "no header"
        raise RecordingError(f"{p} is not an llmtop recording ({why})")
    if cut:
        warnings.append(f"{p}: {cut}; read {len(lines)} polls up to the cut")
    return Recording(
        path=str(p),
        header=head,
        lines=lines,
        warnings=warnings,
        times=[float(line["time"]) for line in lines],
        keyframes=keyframes,
    )


def raws(recording: Recording) -> Sequence[RawPoll]:
    """Every poll of a recording, decoded (for reports; replay decodes lazily)."""
    return list(recording)
