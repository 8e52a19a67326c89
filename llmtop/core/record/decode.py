"""The recording format's decoding: a recording's bytes (gzip or plain JSON lines, appended
segments included) checked line by line into a `Recording`, whose polls decode lazily from their
keyframe. A stream cut by a killed writer yields its whole lines and a `warnings` entry; anything
else wrong is a `RecordingError` naming the source and line, raised at once, so `raw(i)` cannot
fail later. Pure: files are read by llmtop.recording.reader, a gateway's answer by sources.
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from llmtop.core.base.raw import RawPoll, Sample
from llmtop.core.record.encode import FORMAT_VERSION
from llmtop.errors import RecordingError

_GZIP_MAGIC = b"\x1f\x8b"


@dataclass
class Recording:
    """A recording read into memory: its header, its poll lines (JSON text, parsed on use:
    ~8 MB an hour instead of ~115 MB of parsed objects) and a decoding cache."""

    path: str
    header: dict[str, Any]
    lines: list[bytes]
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

    def index_at(self, t: float) -> int:
        """Index of the last poll at or before `t` (0 before the start)."""
        return max(0, bisect.bisect_right(self.times, t) - 1)

    def findings(self, i: int) -> list[dict[str, Any]]:
        """The findings the live run showed at poll `i` (for reference; replay recomputes)."""
        found: list[dict[str, Any]] = json.loads(self.lines[i]).get("findings", [])
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
        line: dict[str, Any] = {}
        for j in range(start, i + 1):
            line = json.loads(self.lines[j])
            apply_line(line, state, j + 2)
        if start > i:  # the cached line itself
            line = json.loads(self.lines[i])
        self._cache = (i, state)
        return to_raw(line, state)

    def _next_keyframe(self, i: int) -> int:
        k = bisect.bisect_right(self.keyframes, i)
        return self.keyframes[k] if k < len(self.keyframes) else len(self.lines)


State = dict[str, tuple[list[tuple[str, Any]], list[float]]]


def apply_line(line: dict[str, Any], state: State, lineno: int) -> None:
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


def to_raw(line: dict[str, Any], state: State) -> RawPoll:
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


def _inflate(buf: bytes) -> tuple[bytes, int | None]:
    """Gunzip the member at the start of `buf`: what is readable of its text, and the bytes it
    spans (None when it is cut short or corrupt)."""
    d = zlib.decompressobj(wbits=31)
    out: list[bytes] = []
    step = 1 << 16
    for i in range(0, len(buf), step):
        chunk = buf[i : i + step]
        try:
            out.append(d.decompress(chunk))
        except zlib.error:
            return b"".join(out), None
        if d.eof:
            return b"".join(out), i + len(chunk) - len(d.unused_data)
    out.append(d.flush())
    return b"".join(out), None


def _next_member(data: bytes, after: int) -> int | None:
    """Offset of the next gzip member that starts cleanly after `after` (an appended segment)."""
    at = data.find(_GZIP_MAGIC + b"\x08", after + 1)
    while at != -1:
        try:
            zlib.decompressobj(wbits=31).decompress(data[at : at + 4096])
        except zlib.error:
            at = data.find(_GZIP_MAGIC + b"\x08", at + 1)
            continue
        return at
    return None


def text_bytes(data: bytes) -> tuple[bytes, list[str]]:
    """The text bytes of a recording's bytes (gunzipped, every member) and what was cut or lost
    on the way.

    A member cut short (a writer killed before its gzip trailer) may be followed by members
    appended later: its whole lines are kept and reading goes on with the next member.
    """
    if not data.startswith(_GZIP_MAGIC):
        return data, []
    out: list[bytes] = []
    notes: list[str] = []
    pos = 0
    while pos < len(data):
        text, used = _inflate(data[pos:])
        if used is not None:
            out.append(text)
            pos += used
            continue
        nxt = _next_member(data, pos)
        if nxt is None:
            out.append(text)
            notes.append("compressed stream ends early")
            break
        text, _ = _inflate(data[pos:nxt])
        out.append(text[: text.rfind(b"\n") + 1])
        notes.append("a segment was cut short (llmtop killed?); the next segment is read")
        pos = nxt
    return b"".join(out), notes


def read_recording_bytes(blob: bytes, name: str = "recording") -> Recording:
    """`read_recording` of a recording's bytes (gzip or plain) held in memory, such as a
    gateway's /admin/history answer; `name` stands for the file in messages and `path`."""
    p = name
    data, notes = text_bytes(blob)
    raw_lines = data.split(b"\n")
    tail = raw_lines.pop()  # after the last newline: b"" unless the file was cut mid-line
    if tail.strip() and not notes:
        notes.append("the last line is incomplete")
    head: dict[str, Any] | None = None
    lines: list[bytes] = []
    times: list[float] = []
    keyframes: list[int] = []
    state: State = {}
    new_segment = True
    for n, text in enumerate(raw_lines, start=1):
        if not text.strip():
            continue
        try:
            obj = json.loads(text)
        except ValueError:
            if head is None:
                raise RecordingError(f"{p} is not an llmtop recording") from None
            following = next((x for x in raw_lines[n:] if x.strip()), b"")
            if following.startswith(b'{"llmtop_recording"'):  # a segment cut mid-line
                notes.append(f"line {n} was cut short (llmtop killed?); the next segment is read")
                continue
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
            obj["kf"] = 1  # a decode starts here with no state (raw() does the same)
            keyframes.append(len(lines))
            new_segment = False
        try:
            apply_line(obj, state, n)
        except RecordingError as e:
            raise RecordingError(f"{p}: {e}") from None
        lines.append(text)
        times.append(float(obj["time"]))
    if head is None:
        why = "empty" if not data else "no header"
        raise RecordingError(f"{p} is not an llmtop recording ({why})")
    warnings = [f"{p}: {'; '.join(notes)}; read {len(lines)} polls"] if notes else []
    return Recording(
        path=p,
        header=head,
        lines=lines,
        warnings=warnings,
        times=times,
        keyframes=keyframes,
    )
