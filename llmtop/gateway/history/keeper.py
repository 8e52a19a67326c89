"""The history's writer: polls handed over by the event loop (`put`, never waits), encoded and
written in batches by one thread, the file kept to its age and size bounds.

The queue is bounded (`QUEUE_MAX` polls): when the disk stalls longer than that, the oldest
polls are dropped and counted, the data path never waits. Encoding happens on the thread, after
the queue, so a dropped poll leaves no hole in the delta chain. Every failure turns history off
with a reason (`status()`, /admin/stats' `history`) and one log line; the gateway serves on,
and the thread tries again every `RETRY_S`.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from llmtop.core.base.raw import RawPoll
from llmtop.core.record.encode import Encoder, header, redact
from llmtop.gateway.history.store import HistoryStore, StoreError, read_lines

log = logging.getLogger("llmtop.gateway")

QUEUE_MAX = 600
"""Polls held for the thread at most (ten minutes at 1 s)."""
BATCH_S = 5.0
"""Seconds between writes: a batch is one transaction (and what a killed gateway loses)."""
PRUNE_EVERY_S = 60.0
RETRY_S = 60.0
"""Seconds before a history that went off tries its file again."""
FLUSH_WAIT_S = 2.0
"""What a read waits at most for the queued polls to be written."""
STEP_BACK_S = 1.0
"""A poll stamped this much before the last one is a clock step back, not jitter."""


class HistoryKeeper:
    """Keeps a gateway's polls in its history file (see the module's docstring)."""

    def __init__(
        self,
        path: Path | None,
        *,
        max_age_s: float,
        max_bytes: int,
        targets: Mapping[str, Any],
        secrets: tuple[str, ...] = (),
        why_off: str | None = None,
        clock: Callable[[], float] = time.time,
        batch_s: float = BATCH_S,
        max_pages: int | None = None,
    ) -> None:
        self.path = path
        self.max_age_s = max_age_s
        self.max_bytes = max_bytes
        self.targets = dict(targets)
        self._secrets = tuple(s for s in secrets if s)
        self.clock = clock
        self.batch_s = batch_s
        self._max_pages = max_pages
        self.why_off = why_off if path is not None else why_off or "off"
        """Why no poll is being kept (None while history is on)."""
        self.dropped = 0
        """Polls dropped because the queue was full (the disk slower than the polls)."""
        self.written = 0
        self.bytes = 0
        self.oldest: float | None = None
        self.steps_back = 0
        self.notes: list[str] = []
        """What happened to the file (moved aside, a clock step), newest last, for the log."""
        self._queue: deque[RawPoll] = deque(maxlen=QUEUE_MAX)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._flushes = 0
        self._flushed = threading.Condition()
        self._thread: threading.Thread | None = None
        self._store: HistoryStore | None = None
        self._encoder = Encoder()
        self._last_prune: float | None = None
        self._last_try: float | None = None

    @property
    def on(self) -> bool:
        return self.why_off is None

    # -- the event loop's side ------------------------------------------------------------------

    def start(self) -> None:
        """Open the file on the thread and start writing (a no-op with history off)."""
        if self.path is None or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="llmtop-history", daemon=True)
        self._thread.start()

    def put(self, raw: RawPoll) -> None:
        """Hand one poll to the thread; never blocks (the oldest goes when the queue is full)."""
        if self.path is None:
            return
        if len(self._queue) == self._queue.maxlen:
            self.dropped += 1
        self._queue.append(raw)

    def close(self, timeout_s: float = 10.0) -> None:
        """Write what is queued, close the file, end the thread (blocks: call it off the loop)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        elif self._store is not None:  # driven by `flush` alone (tests)
            self.flush()
            self._store.close()
            self._store = None

    def status(self) -> dict[str, Any]:
        """/admin/stats' `history`."""
        return {
            "on": self.on,
            "path": None if self.path is None else str(self.path),
            "bytes": self.bytes,
            "oldest": self.oldest,
            "polls_written": self.written,
            "polls_dropped": self.dropped,
            "max_age_s": self.max_age_s,
            "max_bytes": self.max_bytes,
            "why_off": self.why_off,
        }

    def read(self, since: float, until: float | None) -> Iterator[bytes]:
        """The recording from `since` to `until`: this gateway's header first, always, so an
        empty history still reads as a recording; the polls still queued are written first
        (waiting `FLUSH_WAIT_S` at most). Run it off the loop (it waits on the thread)."""
        self._flush_now()
        head = header(1.0, self.targets, self.clock())
        yield json.dumps(head, separators=(",", ":")).encode() + b"\n"
        if self.path is not None:
            yield from read_lines(self.path, since, until)

    def _flush_now(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            return
        with self._flushed:
            target = self._flushes + 1
            self._wake.set()
            self._flushed.wait_for(lambda: self._flushes >= target, FLUSH_WAIT_S)

    # -- the thread -----------------------------------------------------------------------------

    def _run(self) -> None:
        self.flush()  # opens the file: /admin/stats says at once whether history is on
        while not self._stop.is_set():
            self._wake.wait(self.batch_s)
            self._wake.clear()
            self.flush()
            with self._flushed:
                self._flushes += 1
                self._flushed.notify_all()
        self.flush()
        if self._store is not None:
            self._store.close()
            self._store = None

    def flush(self) -> None:
        """Write the queued polls now (the thread's step; tests call it on a fake clock)."""
        batch: list[RawPoll] = []
        while self._queue:
            batch.append(self._queue.popleft())
        if self._store is None:
            tried = self._last_try
            if self.path is not None and (tried is None or self.clock() - tried >= RETRY_S):
                self._open()
            if self._store is None:
                return
        try:
            self._write(batch)
            now = self.clock()
            if self._last_prune is None or now - self._last_prune >= PRUNE_EVERY_S:
                self._last_prune = now
                self._store.prune(now, self.max_age_s, self.max_bytes)
                self.oldest = self._store.oldest()
            elif self.oldest is None and batch:
                self.oldest = self._store.oldest()
            self.bytes = self._store.size_bytes()
        except StoreError as e:
            self._off(e.why)

    def _open(self) -> None:
        assert self.path is not None
        self._last_try = self.clock()
        try:
            store = HistoryStore(self.path, max_pages=self._max_pages)
        except StoreError as e:
            self._off(e.why)
            return
        if store.moved is not None:
            where, why = store.moved
            self._note(f"{self.path} was {why}: moved to {where.name}, history starts afresh")
        self._store = store
        try:
            self._segment()
            self.oldest = store.oldest()
            self.bytes = store.size_bytes()
        except StoreError as e:
            self._off(e.why)
            return
        if self.why_off is not None:
            log.info("llmtop gateway: history on again: %s", self.path)
        elif not self.written:
            log.info(
                "llmtop gateway: history in %s (%g h, %g MB at most; --no-history for none)",
                self.path,
                self.max_age_s / 3600,
                self.max_bytes / 1e6,
            )
        self.why_off = None

    def _segment(self) -> None:
        assert self._store is not None
        self._encoder = Encoder()
        self._store.begin_segment(header(1.0, self.targets, self.clock()))

    def _write(self, batch: list[RawPoll]) -> None:
        assert self._store is not None
        rows: list[tuple[float, bool, bytes]] = []
        for raw in batch:
            last = rows[-1][0] if rows else self._store.last_t
            if last is not None and raw.time < last - STEP_BACK_S:
                self._store.append(rows)
                rows = []
                gone = self._store.drop_from(raw.time)
                self.steps_back += 1
                self._note(
                    f"the clock stepped back {last - raw.time:.1f} s: {gone} polls stamped"
                    " from then on dropped, a new segment starts"
                )
                self._segment()
                self.oldest = self._store.oldest()
            elif last is not None and raw.time <= last:
                continue  # jitter of a step back under a second: the poll is dropped
            line = self._encoder.encode(raw)
            text = redact(json.dumps(line, separators=(",", ":")), self._secrets)
            rows.append((raw.time, bool(line.get("kf")), text.encode()))
        try:
            self._store.append(rows)
        except StoreError:
            self._encoder = Encoder()  # the chain is broken: the next poll is a keyframe
            raise
        self.written += len(rows)

    def _off(self, why: str) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None
        if why != self.why_off:
            log.warning(
                "llmtop gateway: history off: %s: %s (serving goes on; retried every %g s)",
                self.path,
                why,
                RETRY_S,
            )
        self.why_off = why

    def _note(self, text: str) -> None:
        self.notes.append(text)
        del self.notes[:-20]
        log.warning("llmtop gateway: history: %s", text)
