"""The history file: one SQLite database per gateway, each row one poll's recording line.

Why SQLite and not segment files in the recording format (measured by bench/bench_history.py,
docs/recording.md "History in the gateway"): one file that a killed gateway never leaves torn
(a batch is one transaction), pruning to the second by age and by size, "since" found by an
index, and a corrupt or foreign file told apart at open. Rows are zlib-compressed with the
previous row of their segment as the preset dictionary (the lines share most of their text),
1.3x the bytes of one gzip stream.

A segment is one run of the gateway (or what follows a clock step back): its header line is kept
once, its first row is a keyframe. `read_lines` gives back the recording format: a header, then
the lines from `since`, the first one made a keyframe so a reader needs nothing before it.
Not thread-safe: the keeper's thread owns a store; each read opens its own connection.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sqlite3
import time
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from llmtop.core.record.decode import State, apply_line

SCHEMA = 1
"""PRAGMA user_version of a history file this code writes; another is moved aside."""
APP = "llmtop-gateway-history"
_TABLES = """
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE segments(id INTEGER PRIMARY KEY, started REAL NOT NULL, header TEXT NOT NULL);
CREATE TABLE polls(
    id INTEGER PRIMARY KEY, seg INTEGER NOT NULL, t REAL NOT NULL, kf INTEGER NOT NULL,
    data BLOB NOT NULL
);
CREATE INDEX polls_t ON polls(t);
"""
PRUNE_CHUNK = 60
"""Polls deleted at a time while over the size bound (a minute at 1 s)."""


class StoreError(Exception):
    """The history file cannot be used: `why` in a person's words; `moved` where a bad file
    was put aside (the store then starts fresh)."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


def _why(e: BaseException) -> str:
    """A person's words for a SQLite or OS failure."""
    text = str(e) or type(e).__name__
    if isinstance(e, OSError) and e.strerror:
        text = e.strerror
    if "disk is full" in text or "No space left" in text:
        return "disk full"
    if "readonly" in text or "Permission denied" in text or "unable to open" in text:
        return f"cannot write there ({text})"
    return text


def _connect(path: Path, *, read_only: bool = False) -> sqlite3.Connection:
    if read_only:
        return sqlite3.connect(
            f"file:{path}?mode=ro", uri=True, isolation_level=None, check_same_thread=False
        )
    return sqlite3.connect(path, isolation_level=None, check_same_thread=False)


def _compress(text: bytes, prev: bytes | None) -> bytes:
    c = zlib.compressobj(6, zdict=prev) if prev else zlib.compressobj(6)
    return c.compress(text) + c.flush()


def _decompress(blob: bytes, prev: bytes | None) -> bytes:
    d = zlib.decompressobj(zdict=prev) if prev else zlib.decompressobj()
    return d.decompress(blob) + d.flush()


class HistoryStore:
    """One open history file (see the module's docstring)."""

    def __init__(self, path: Path, *, max_pages: int | None = None) -> None:
        """Open `path`, creating it (and its folder) if absent; StoreError when it cannot be
        written. A file that is not a history of this version is moved aside first (`moved`).
        `max_pages`: SQLite's page cap, a full disk for tests."""
        self.path = path
        self.moved: tuple[Path, str] | None = None
        """(where, why) a bad file was moved, when one was."""
        self._lock = _lock(path)
        try:
            problem = _check(path) if path.exists() else None
            if problem is not None:
                self.moved = (_move_aside(path, problem[0]), problem[1])
            self._con = _connect(path)
            self._con.execute("PRAGMA auto_vacuum=INCREMENTAL")
            self._con.execute("PRAGMA journal_mode=WAL")
            self._con.execute("PRAGMA synchronous=NORMAL")
            # the write-ahead log folded in each MB and cut back to 1 MB: it counts on disk too
            self._con.execute("PRAGMA wal_autocheckpoint=256")
            self._con.execute(f"PRAGMA journal_size_limit={1 << 20}")
            if max_pages is not None:
                self._con.execute(f"PRAGMA max_page_count={int(max_pages)}")
            if self._con.execute("PRAGMA user_version").fetchone()[0] != SCHEMA:
                self._con.executescript(
                    f"BEGIN; {_TABLES} INSERT INTO meta VALUES ('app', '{APP}');"
                    f" PRAGMA user_version={SCHEMA}; COMMIT;"
                )
        except (sqlite3.Error, OSError) as e:
            os.close(self._lock)
            raise StoreError(_why(e)) from None
        self.segment: int | None = None
        self._prev: bytes | None = None
        self.last_t: float | None = self._one("SELECT max(t) FROM polls")

    def _one(self, sql: str, *args: Any) -> Any:
        row = self._con.execute(sql, args).fetchone()
        return None if row is None else row[0]

    def begin_segment(self, header: dict[str, Any]) -> None:
        """Start a segment (a run, or after a clock step): its header, then a keyframe."""
        text = json.dumps(header, separators=(",", ":"))
        try:
            cur = self._con.execute(
                "INSERT INTO segments(started, header) VALUES (?, ?)",
                (float(header.get("started", time.time())), text),
            )
        except sqlite3.Error as e:
            raise StoreError(_why(e)) from None
        self.segment = cur.lastrowid
        self._prev = None

    def append(self, rows: Sequence[tuple[float, bool, bytes]]) -> None:
        """Write (time, keyframe, line) rows in one transaction; StoreError when it fails (the
        batch is then not written)."""
        assert self.segment is not None, "begin_segment first"
        prev = self._prev
        packed = []
        for t, kf, text in rows:
            packed.append((self.segment, t, int(kf), _compress(text, None if kf else prev)))
            prev = text
        try:
            with self._con:
                self._con.execute("BEGIN")
                self._con.executemany(
                    "INSERT INTO polls(seg, t, kf, data) VALUES (?, ?, ?, ?)", packed
                )
        except sqlite3.Error as e:
            self._prev = None  # the next batch must start on a keyframe: the writer resets
            raise StoreError(_why(e)) from None
        self._prev = prev
        if rows:
            self.last_t = rows[-1][0]

    def drop_from(self, t: float) -> int:
        """Delete the polls stamped at `t` or after (a clock that stepped back: they claim a time
        that has not come); returns how many."""
        try:
            with self._con:
                self._con.execute("BEGIN")
                n = self._con.execute("DELETE FROM polls WHERE t >= ?", (t,)).rowcount
        except sqlite3.Error as e:
            raise StoreError(_why(e)) from None
        self.last_t = self._one("SELECT max(t) FROM polls")
        return int(n)

    def prune(self, now: float, max_age_s: float, max_bytes: int) -> int:
        """Delete what is older than `max_age_s`, then the oldest polls while the file holds
        more than `max_bytes`; give the pages back to the disk. Returns the polls deleted."""
        try:
            with self._con:
                self._con.execute("BEGIN")
                n = self._con.execute("DELETE FROM polls WHERE t < ?", (now - max_age_s,)).rowcount
                while self._used_bytes() > max_bytes and self._one("SELECT count(*) FROM polls"):
                    n += self._con.execute(
                        "DELETE FROM polls WHERE id IN (SELECT id FROM polls ORDER BY id LIMIT ?)",
                        (PRUNE_CHUNK,),
                    ).rowcount
                self._con.execute(
                    "DELETE FROM segments WHERE id != ? AND id NOT IN (SELECT seg FROM polls)",
                    (self.segment or -1,),
                )
            self._con.execute("PRAGMA incremental_vacuum")
        except sqlite3.Error as e:
            raise StoreError(_why(e)) from None
        return int(n)

    def _used_bytes(self) -> int:
        pages = self._one("PRAGMA page_count") - self._one("PRAGMA freelist_count")
        return int(pages * self._one("PRAGMA page_size"))

    def size_bytes(self) -> int:
        """The file's bytes on disk, its write-ahead log included."""
        total = 0
        for p in (self.path, self.path.with_name(self.path.name + "-wal")):
            with contextlib.suppress(OSError):
                total += p.stat().st_size
        return total

    def oldest(self) -> float | None:
        """The time of the oldest poll kept."""
        value = self._one("SELECT min(t) FROM polls")
        return None if value is None else float(value)

    def close(self) -> None:
        """Fold the write-ahead log into the file and close it."""
        with contextlib.suppress(sqlite3.Error):
            self._con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        with contextlib.suppress(sqlite3.Error):
            self._con.close()
        with contextlib.suppress(OSError):
            os.close(self._lock)


def _lock(path: Path) -> int:
    """Hold `<file>.lock` (flock) while the store is open: two gateways on one file would mix
    their polls. StoreError when another process holds it, or the folder cannot be written."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise StoreError(f"cannot make the folder {path.parent} ({e.strerror or e})") from None
    try:
        fd = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as e:
        raise StoreError(_why(e)) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        other = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise StoreError(f"in use by another gateway (pid {other})") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    return fd


def _check(path: Path) -> tuple[str, str] | None:
    """Why an existing file cannot be this gateway's history: (a tag for its new name, a
    person's words), or None when it can."""
    try:
        con = _connect(path)
        try:
            version = con.execute("PRAGMA user_version").fetchone()[0]
            tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master")}
            if not tables and version == 0:
                return None  # an empty file: made fresh
            if version != SCHEMA:
                return f"v{version}", f"written by another llmtop version (schema {version})"
            if not {"meta", "segments", "polls"} <= tables:
                return "corrupt", "not an llmtop history file"
            check = con.execute("PRAGMA quick_check").fetchone()[0]
            if check != "ok":
                return "corrupt", f"corrupt ({check})"
        finally:
            con.close()
    except sqlite3.DatabaseError as e:
        return "corrupt", f"corrupt ({e})"
    return None


def _move_aside(path: Path, tag: str) -> Path:
    """Rename a bad history file (and its -wal, -shm) to `<name>.<tag>-<time>`; kept for a
    person to look at, never read again."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    aside = path.with_name(f"{path.name}.{tag}-{stamp}")
    for suffix in ("-wal", "-shm"):
        side = path.with_name(path.name + suffix)
        if side.exists():
            side.rename(aside.with_name(aside.name + suffix))
    path.rename(aside)
    return aside


def read_lines(path: Path, since: float, until: float | None = None) -> Iterator[bytes]:
    """The recording of the polls stamped from `since` to `until` (unix times): each segment's
    header line, then its lines, the first one served made a keyframe. Nothing but a header
    when the file is absent or holds nothing there. Raises StoreError on an unreadable file."""
    if not path.exists():
        return
    try:
        con = _connect(path, read_only=True)
    except sqlite3.Error as e:
        raise StoreError(_why(e)) from None
    try:
        yield from _lines(con, since, until)
    except sqlite3.Error as e:
        raise StoreError(_why(e)) from None
    finally:
        con.close()


def _lines(con: sqlite3.Connection, since: float, until: float | None) -> Iterator[bytes]:
    start = con.execute("SELECT max(id) FROM polls WHERE kf = 1 AND t <= ?", (since,)).fetchone()[0]
    if start is None:
        start = con.execute("SELECT min(id) FROM polls WHERE kf = 1").fetchone()[0]
    if start is None:
        return
    headers = dict(con.execute("SELECT id, header FROM segments").fetchall())
    end = float("inf") if until is None else until
    rows = con.execute(
        "SELECT seg, t, kf, data FROM polls WHERE id >= ? AND t <= ? ORDER BY id", (start, end)
    )
    seg: int | None = None
    prev: bytes | None = None
    state: State = {}
    served_in_seg = False
    for s, t, kf, blob in rows:
        if s != seg:
            seg, prev, state, served_in_seg = s, None, {}, False
        if not kf and prev is None:
            continue  # the head of a segment was pruned: wait for its next keyframe
        text = _decompress(blob, None if kf else prev)
        prev = text
        if served_in_seg:
            yield text + b"\n"
            continue
        line = json.loads(text)
        apply_line(line, state, 0)
        if t < since:
            continue
        served_in_seg = True
        yield str(headers.get(s, "{}")).encode() + b"\n"
        yield (text if kf else _as_keyframe(line, state)) + b"\n"


def _as_keyframe(line: dict[str, Any], state: State) -> bytes:
    """A delta line rewritten whole, from the decoded samples, so a stream may start on it."""
    for e in line.get("engines", []):
        if "delta" in e:
            keys, values = state[str(e["url"])]
            del e["delta"]
            e["samples"] = [[n, dict(lab), v] for (n, lab), v in zip(keys, values, strict=True)]
    line["kf"] = 1
    return json.dumps(line, separators=(",", ":")).encode()
