"""Recording format: round trip, delta encoding and keyframes, truncation, secrets, bad files."""

from __future__ import annotations

import dataclasses
import gzip
import json
import random
from pathlib import Path

import pytest

from llmtop.core.base.raw import RawEngine, RawPoll, Sample
from llmtop.core.base.snapshot import Finding, GpuStats
from llmtop.core.exposition import promtext
from llmtop.core.vllm.names import sample_names
from llmtop.errors import RecordingError
from llmtop.recording.reader import read_recording
from llmtop.recording.writer import Recorder

TOKEN = "s3cr3t-admin-token-1234"
URL = "http://127.0.0.1:8000"


def _base_samples(fixtures_dir: Path) -> tuple[Sample, ...]:
    text = (fixtures_dir / "metrics-load.txt").read_text()
    return promtext.parse(text, promtext.keep_names(sample_names()))


def _polls(base: tuple[Sample, ...], n: int, seed: int = 1) -> list[RawPoll]:
    """n polls of realistic drift: counters and buckets grow, gauges move, one scrape fails."""
    rng = random.Random(seed)
    values = [s.value for s in base]
    out = []
    for i in range(n):
        for j, s in enumerate(base):
            if s.name.endswith(("_total", "_count", "_sum", "_bucket")):
                if rng.random() < 0.2:
                    values[j] += rng.randint(1, 50)
            elif rng.random() < 0.1:
                values[j] = rng.random() * 10
        samples: tuple[Sample, ...] | None = tuple(
            Sample(s.name, s.labels, v) for s, v in zip(base, values, strict=True)
        )
        if i == 7:
            samples = None
        elif i >= 15:  # the series set grows mid-run
            assert samples is not None
            samples = (*samples, Sample("vllm:num_requests_waiting", (("engine", "1"),), 3.0))
        engine = RawEngine(URL, samples, error="timeout" if samples is None else None)
        out.append(
            RawPoll(
                time=1_000.0 + i,
                engines=(engine,),
                gateway_url="http://127.0.0.1:9000",
                gateway={"in_flight": i % 9, "queued": i, "limits": {"max_concurrency": 8}},
                gpus=(GpuStats(index=0, name="sim", util_frac=rng.random(), processes=("p",)),),
                events=({"time": 1_000.0 + i, "field": "max_concurrency", "new": 8},)
                if i == 20
                else (),
            )
        )
    return out


def _record(path: Path, polls: list[RawPoll], **kwargs: object) -> None:
    rec = Recorder(path, interval_s=1.0, targets={"vllm": [URL]}, **kwargs)  # type: ignore[arg-type]
    rec.open()
    for p in polls:
        rec.write(p, ())
    rec.close()


@pytest.mark.parametrize("name", ["rec.jsonl", "rec.jsonl.gz"])
def test_round_trip_sequential_and_random_access(
    tmp_path: Path, fixtures_dir: Path, name: str
) -> None:
    polls = _polls(_base_samples(fixtures_dir), 130)
    _record(tmp_path / name, polls, keyframe_every=60)
    rec = read_recording(tmp_path / name)
    assert rec.warnings == []
    assert rec.header["llmtop_recording"] == 1
    assert rec.header["targets"] == {"vllm": [URL]}
    assert len(rec) == len(polls)
    assert list(rec) == polls
    order = list(range(len(polls)))
    random.Random(3).shuffle(order)
    for i in order[:40]:
        assert rec.raw(i) == polls[i]
    assert rec.times[0] == 1_000.0
    assert rec.times[-1] == 1_129.0
    assert rec.index_at(1_010.5) == 10
    assert rec.index_at(0) == 0


def test_delta_lines_hold_only_changed_samples_and_keyframes_repeat(
    tmp_path: Path, fixtures_dir: Path
) -> None:
    polls = _polls(_base_samples(fixtures_dir), 25)
    path = tmp_path / "rec.jsonl"
    _record(path, polls, keyframe_every=10)
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    body = lines[1:]
    assert [i for i, line in enumerate(body) if line.get("kf")] == [0, 10, 20]
    for i, line in enumerate(body):
        entry = line["engines"][0]
        prev, cur = polls[i - 1].engines[0].samples, polls[i].engines[0].samples
        if line.get("kf") or prev is None or cur is None or len(prev) != len(cur):
            assert "delta" not in entry
            continue
        changed = [j for j, (a, b) in enumerate(zip(prev, cur, strict=True)) if a.value != b.value]
        assert [d[0] for d in entry["delta"]] == changed
        assert len(changed) < len(cur)
    # a delta line is much smaller than a keyframe
    assert len(json.dumps(body[5])) * 3 < len(json.dumps(body[0]))


def test_findings_are_kept_for_reference(tmp_path: Path, fixtures_dir: Path) -> None:
    polls = _polls(_base_samples(fixtures_dir), 3)
    finding = Finding("kv-exhausted", "critical", "kv", "KV cache full", "cap it", since=1001.0)
    rec = Recorder(tmp_path / "r.jsonl.gz")
    rec.open()
    for p in polls:
        rec.write(p, (finding,) if p.time >= 1001.0 else ())
    rec.close()
    read = read_recording(tmp_path / "r.jsonl.gz")
    assert read.findings(0) == []
    assert read.findings(2)[0]["id"] == "kv-exhausted"
    assert read.findings(2)[0]["since"] == 1001.0


def test_killed_writer_leaves_a_readable_gzip(tmp_path: Path, fixtures_dir: Path) -> None:
    polls = _polls(_base_samples(fixtures_dir), 12)
    path = tmp_path / "live.jsonl.gz"
    rec = Recorder(path)
    rec.open()
    try:
        for p in polls:
            rec.write(p)
        # the process "dies" here: no gzip trailer yet, but every line was flushed
        read = read_recording(path)
        assert len(read) == 12
        assert read.raw(11) == polls[11]
        assert "ends early" in read.warnings[0]
    finally:
        rec.close()
    assert read_recording(path).warnings == []


@pytest.mark.parametrize("fraction", [0.3, 0.77, 0.99])
def test_truncated_gzip_replays_up_to_the_cut(
    tmp_path: Path, fixtures_dir: Path, fraction: float
) -> None:
    polls = _polls(_base_samples(fixtures_dir), 80)
    full = tmp_path / "full.jsonl.gz"
    _record(full, polls)
    data = full.read_bytes()
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(data[: int(len(data) * fraction)])
    read = read_recording(cut)
    assert 0 < len(read) < len(polls)
    assert list(read) == polls[: len(read)]
    assert read.warnings
    assert f"read {len(read)} polls" in read.warnings[0]


def test_truncated_plain_file_drops_the_partial_line(tmp_path: Path, fixtures_dir: Path) -> None:
    polls = _polls(_base_samples(fixtures_dir), 10)
    path = tmp_path / "r.jsonl"
    _record(path, polls)
    data = path.read_bytes()
    path.write_bytes(data[:-40])
    read = read_recording(path)
    assert len(read) == 9
    assert "incomplete" in read.warnings[0]


def test_appending_starts_a_new_segment(tmp_path: Path, fixtures_dir: Path) -> None:
    polls = _polls(_base_samples(fixtures_dir), 30)
    path = tmp_path / "r.jsonl.gz"
    _record(path, polls[:12])
    _record(path, polls[12:])
    read = read_recording(path)
    assert list(read) == polls
    assert 12 in read.keyframes


@pytest.mark.parametrize("name", ["r.jsonl", "r.jsonl.gz"])
def test_a_killed_session_then_an_appended_one_both_replay(
    tmp_path: Path, fixtures_dir: Path, name: str
) -> None:
    """SSH drops, llmtop dies without closing the file, the engineer runs --record again."""
    polls = _polls(_base_samples(fixtures_dir), 30)
    path = tmp_path / name
    _record(path, polls[:12])
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - (60 if name.endswith(".gz") else 700)])
    _record(path, polls[12:])
    read = read_recording(path)
    assert "cut short" in read.warnings[0]
    assert 5 <= read.keyframes[1] < 12
    first = read.keyframes[1]
    assert list(read)[:first] == polls[:first]
    assert list(read)[first:] == polls[12:]


def test_secrets_are_never_written(tmp_path: Path, fixtures_dir: Path) -> None:
    base = _base_samples(fixtures_dir)
    poll = dataclasses.replace(
        _polls(base, 1)[0],
        gateway={
            "queued": 1,
            "admin_token": TOKEN,
            "headers": {"Authorization": f"Bearer {TOKEN}"},
        },
        events=({"time": 1.0, "note": f"set by {TOKEN}", "api_key": "sk-abc"},),
        gateway_url=f"http://admin:{TOKEN}@127.0.0.1:9000",
    )
    for name in ("r.jsonl", "r.jsonl.gz"):
        path = tmp_path / name
        rec = Recorder(
            path,
            targets={"gateway": f"http://user:{TOKEN}@gw:9000", "vllm": [URL]},
            secrets=[TOKEN, None],
        )
        rec.open()
        rec.write(poll)
        rec.close()
        raw_bytes = path.read_bytes()
        text = gzip.decompress(raw_bytes) if name.endswith(".gz") else raw_bytes
        assert TOKEN.encode() not in text
        assert b"sk-abc" not in text
        assert b"Authorization" not in text
        read = read_recording(path)
        assert read.raw(0).gateway == {"queued": 1, "headers": {}}
        assert read.header["targets"]["gateway"] == "http://gw:9000"


def test_toggle_starts_with_a_default_name_and_stops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fixtures_dir: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    rec = Recorder()
    assert not rec.recording
    rec.write(_polls(_base_samples(fixtures_dir), 1)[0])  # not recording: ignored
    assert rec.toggle() is True
    assert rec.path is not None
    assert rec.path.name.startswith("llmtop-")
    assert rec.path.name.endswith(".jsonl.gz")
    rec.write(None)  # before the first poll: ignored
    rec.write(_polls(_base_samples(fixtures_dir), 1)[0])
    assert rec.toggle() is False
    assert len(read_recording(tmp_path / rec.path)) == 1


def test_bad_files_give_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(RecordingError, match="not found"):
        read_recording(tmp_path / "missing.jsonl")
    (tmp_path / "empty.jsonl").write_bytes(b"")
    with pytest.raises(RecordingError, match="not an llmtop recording"):
        read_recording(tmp_path / "empty.jsonl")
    (tmp_path / "metrics.txt").write_text("# HELP x y\nx 1\n")
    with pytest.raises(RecordingError, match="not an llmtop recording"):
        read_recording(tmp_path / "metrics.txt")
    (tmp_path / "json.jsonl").write_text('{"time": 1}\n')
    with pytest.raises(RecordingError, match="no header"):
        read_recording(tmp_path / "json.jsonl")
    header = json.dumps({"llmtop_recording": 1, "started": 0, "interval_s": 1, "targets": {}})
    (tmp_path / "mid.jsonl").write_text(f'{header}\n{{"time": 1}}\nnot json\n{{"time": 2}}\n')
    with pytest.raises(RecordingError, match="line 3 is not valid JSON"):
        read_recording(tmp_path / "mid.jsonl")
    delta = {"time": 2, "engines": [{"url": URL, "delta": [[0, 1.0]]}]}
    (tmp_path / "delta.jsonl").write_text(f"{header}\n{json.dumps(delta)}\n")
    with pytest.raises(RecordingError, match="line 2: bad engine samples"):
        read_recording(tmp_path / "delta.jsonl")
    future = json.dumps({"llmtop_recording": 99})
    (tmp_path / "future.jsonl").write_text(f"{future}\n")
    with pytest.raises(RecordingError, match="format 99"):
        read_recording(tmp_path / "future.jsonl")
    (tmp_path / "bad.gz").write_bytes(b"\x1f\x8b\x08\x00garbage")
    with pytest.raises(RecordingError, match="not an llmtop recording"):
        read_recording(tmp_path / "bad.gz")


def test_unwritable_path_is_a_recording_error(tmp_path: Path) -> None:
    rec = Recorder(tmp_path / "no" / "such" / "dir" / "r.jsonl.gz")
    with pytest.raises(RecordingError, match="cannot record"):
        rec.open()
    assert not rec.recording
