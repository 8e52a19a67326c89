"""The recording format's encoding: a RawPoll as one JSON line, samples delta-encoded against
the engine's previous poll (a keyframe every `KEYFRAME_EVERY` polls), credentials scrubbed; the
segment header. Pure: the writers (llmtop.recording.writer, the gateway's history) own the files.
Format: docs/recording.md, "Format".
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import llmtop
from llmtop.core.base.raw import RawPoll, Sample

if TYPE_CHECKING:
    from llmtop.core.base.snapshot import Finding

FORMAT_VERSION = 1
"""The format's version in every header; a reader refuses any other."""
KEYFRAME_EVERY = 60
"""Polls between keyframes: a minute at the default 1 s refresh."""
REDACTED = "[redacted]"
_SECRET_KEY = re.compile(
    r"(^|[_-])(token|authorization|api[_-]?key|secret|password|passwd|cookie)$", re.I
)
"""Keys dropped from the gateway's JSON and events (not `prompt_tokens`: whole words only)."""
_USERINFO = re.compile(r"(?<=://)[^/@\s]+@")


# ---- pure helpers: scrubbing and encoding -------------------------------------------


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
        answers = d.pop("prometheus")
        d = scrub(d)  # samples are names and numbers only; their labels stay as scraped
        for e_dict, samples in zip(d["engines"], samples_of, strict=True):
            e_dict["samples"] = samples
        if answers is not None:  # figures by name; only the URL and the error quote a URL
            urls = {"url": scrub(answers["url"]), "error": scrub(answers["error"])}
            d["prometheus"] = {**answers, **urls}
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
        found = [scrub(_finding_dict(f)) for f in findings]  # summaries quote URLs
        if found:
            line["findings"] = found
        return line


def header(interval_s: float, targets: Mapping[str, Any], started: float) -> dict[str, Any]:
    """The first line of a recording segment (targets scrubbed of credentials)."""
    return {
        "llmtop_recording": FORMAT_VERSION,
        "version": llmtop.__version__,
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
