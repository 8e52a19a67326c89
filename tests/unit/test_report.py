"""The postmortem report: pure summary of snapshots, and `llmtop report` on a scripted recording.

`scripted_polls` is also the deterministic input of the replay tests: three minutes of one
engine behind the gateway, healthy, then KV exhaustion with TTFT toward 40 s, then the gateway
capped from 64 to 8 at +120 s and the engine recovering while the excess queues in the gateway.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmtop.cli import main
from llmtop.core.base.snapshot import EngineStats, Finding, GatewayStats, Snapshot
from llmtop.recording import report
from tests.support.report import CAP_AT, GW, T0, URL, write_scripted

PNG = b"\x89PNG\r\n\x1a\n"


# ---- the pure summary ---------------------------------------------------------------------------


def _snap(t: float, *, waiting: float, ttft: float | None, cap: int, finding: str = "") -> Snapshot:
    engine = EngineStats(
        URL, True, waiting=waiting, kv_cache_usage_frac=waiting / 10, ttft_p95_s=ttft
    )
    gw = GatewayStats(GW, True, queued=int(waiting), max_concurrency=cap, ttft_p95_s=ttft)
    findings = (
        (Finding(finding, "critical", "kv", "KV full", "cap it", since=t - 2),) if finding else ()
    )
    return Snapshot(time=t, engines=(engine,), gateway=gw, findings=findings)


def test_summary_of_scripted_snapshots() -> None:
    snaps = [
        _snap(0, waiting=1, ttft=1.0, cap=64),
        _snap(10, waiting=5, ttft=3.0, cap=64, finding="kv-exhausted"),
        _snap(20, waiting=9, ttft=None, cap=64, finding="kv-exhausted"),
        _snap(30, waiting=2, ttft=2.0, cap=8),  # changed without an event: "observed"
        _snap(40, waiting=0, ttft=0.5, cap=8, finding="kv-exhausted"),  # refires
        _snap(50, waiting=0, ttft=0.5, cap=4),
    ]
    events = [{"time": 45.0, "field": "max_concurrency", "old": 8, "new": 4, "source": "admin"}]
    r = report.build(snaps, events, source="x", ttft_slo_s=1.0)
    assert (r.start, r.end, r.polls, r.duration_s) == (0, 50, 6, 50)
    assert r.peaks["waiting"] == report.Peak(9, 20)
    assert r.peaks["gateway_queued"] == report.Peak(9, 20)
    assert r.peaks["kv_cache_usage_frac"] == report.Peak(0.9, 20)
    assert r.peaks["ttft_p95_s"] == report.Peak(3.0, 10)
    spans = [(f.id, f.fired, f.cleared) for f in r.findings]
    assert spans == [("kv-exhausted", 8, 30), ("kv-exhausted", 38, 50)]
    changes = [(c.time, c.field, c.old, c.new, c.source) for c in r.limit_changes]
    assert changes == [
        (30, "max_concurrency", 64, 8, "observed"),
        (45, "max_concurrency", 8, 4, "admin"),
    ]
    first, second = r.limit_changes
    assert first.ttft_p95_before_s == pytest.approx((1.0 + 3.0) / 2)  # t in [0, 30): 20 unknown
    assert first.ttft_p95_after_s == pytest.approx((2.0 + 0.5 + 0.5) / 3)  # 30 is after
    assert second.ttft_p95_before_s == pytest.approx((2.0 + 0.5) / 2)
    assert second.gateway_ttft_p95_after_s == pytest.approx(0.5)
    assert first.ttft_under_slo_after_s == 10  # 2.0 s at 30, 0.5 s at 40
    assert second.ttft_under_slo_after_s == 5
    d = r.to_dict()
    assert d["duration_s"] == 50
    assert "series" not in d
    json.dumps(d)


def test_empty_run_reports_unknowns() -> None:
    r = report.build([])
    assert r.start is None
    assert r.peaks["waiting"] == report.Peak(None, None)
    text = report.to_markdown(r)
    assert "n/a" in text
    assert "No finding fired." in text
    assert "No limit changed." in text


# ---- `llmtop report` on a recording ----------------------------------------------------------


def test_report_json_on_a_scripted_recording(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_scripted(tmp_path / "incident.jsonl.gz")
    assert main(["report", str(path), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["start"] == T0
    assert d["end"] == T0 + 179
    assert d["polls"] == 180
    assert d["peaks"]["waiting"]["value"] == 30
    assert T0 + 60 <= d["peaks"]["waiting"]["time"] < T0 + CAP_AT
    assert d["peaks"]["kv_cache_usage_frac"]["value"] == pytest.approx(0.99)
    assert d["peaks"]["ttft_p95_s"]["value"] > 20
    assert d["peaks"]["gateway_queued"]["value"] == 20
    kv = [f for f in d["findings"] if f["id"] == "kv-exhausted"]
    assert len(kv) == 1
    assert T0 + 60 < kv[0]["fired"] < T0 + 70  # fire_after_s past the start of the overload
    assert T0 + CAP_AT < kv[0]["cleared"] < T0 + CAP_AT + 20  # clear_after_s past the fix
    (change,) = d["limit_changes"]
    assert (change["field"], change["old"], change["new"], change["source"]) == (
        "max_concurrency",
        64,
        8,
        "tui",
    )
    assert change["time"] == T0 + CAP_AT
    assert change["ttft_p95_before_s"] > 20
    assert change["ttft_p95_after_s"] < change["ttft_p95_before_s"]
    assert change["gateway_ttft_p95_before_s"] == pytest.approx(36.0)
    assert change["gateway_ttft_p95_after_s"] == pytest.approx(6.0)
    assert 0 < change["ttft_under_slo_after_s"] <= 15  # the 10 s quantile window drains


def test_report_md_and_charts_into_a_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_scripted(tmp_path / "incident.jsonl")
    out = tmp_path / "out"
    assert main(["report", str(path), "--out", str(out)]) == 0
    printed = capsys.readouterr().out.split()
    names = {"report.md", "ttft_p95.png", "kv_usage.png", "queues.png"}
    assert {Path(p).name for p in printed} == names
    for name in names - {"report.md"}:
        data = (out / name).read_bytes()
        assert data.startswith(PNG)
        assert len(data) > 5_000
    md = (out / "report.md").read_text()
    assert md.startswith("# llmtop report: incident.jsonl")
    assert "| max_concurrency 64 → 8 | tui |" in md
    assert "| kv-exhausted | critical |" in md
    assert "![TTFT p95](ttft_p95.png)" in md
    assert "2025-11-29 18:00:00 UTC" in md


def test_report_md_to_stdout_without_charts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_scripted(tmp_path / "incident.jsonl.gz", n=30)
    assert main(["report", str(path)]) == 0
    md = capsys.readouterr().out
    assert "## Peaks" in md
    assert "No limit changed." in md
    assert "![" not in md


def test_report_on_a_bad_file_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", str(tmp_path / "nope.jsonl.gz")]) == 6
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "recording not found" in err


def test_report_on_the_recorded_demo_story(
    fixtures_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """tests/fixtures/recording-story.jsonl.gz: `llmtop demo --headless --apply-cap 8 --record`."""
    path = fixtures_dir / "recording-story.jsonl.gz"
    assert main(["report", str(path), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["polls"] == 300
    (change,) = d["limit_changes"]
    cap_at = change["time"]
    assert (change["field"], change["old"], change["new"], change["source"]) == (
        "max_concurrency",
        256,
        8,
        "demo",
    )
    assert 140 < cap_at - d["start"] < 160
    assert d["peaks"]["kv_cache_usage_frac"]["value"] >= 0.99
    assert d["peaks"]["kv_cache_usage_frac"]["time"] < cap_at
    assert d["peaks"]["waiting"]["time"] < cap_at  # the queue was in the engine...
    assert d["peaks"]["gateway_queued"]["time"] > cap_at  # ...and moved to the gateway
    kv = [f for f in d["findings"] if f["id"] == "kv-exhausted"]
    assert kv
    assert kv[0]["fired"] < cap_at < kv[0]["cleared"]
    assert change["ttft_under_slo_after_s"] is not None


def test_report_json_and_charts_into_a_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_scripted(tmp_path / "incident.jsonl.gz", n=150)
    out = tmp_path / "deep" / "out"
    assert main(["report", str(path), "--json", "--out", str(out)]) == 0
    assert {Path(p).name for p in capsys.readouterr().out.split()} == {
        "report.json",
        "ttft_p95.png",
        "kv_usage.png",
        "queues.png",
    }
    d = json.loads((out / "report.json").read_text())
    assert d["polls"] == 150
    assert (out / "queues.png").read_bytes().startswith(PNG)


def test_markdown_cells_survive_pipes_and_newlines() -> None:
    snap = Snapshot(
        time=1.0,
        findings=(Finding("x", "warning", "queue", "a | b\nc", "do"),),
    )
    md = report.to_markdown(report.build([snap]))
    assert "| a / b c |" in md


def test_report_says_where_the_current_rules_disagree_with_the_live_run(tmp_path: Path) -> None:
    snaps = [_snap(0, waiting=1, ttft=1.0, cap=64, finding="kv-exhausted")]
    same = report.build(snaps, live_findings=[[{"id": "kv-exhausted"}]])
    assert "The live run showed the same findings." in report.to_markdown(same)
    other = report.build(snaps, live_findings=[[{"id": "old-rule"}], []])
    md = report.to_markdown(other)
    assert "Shown live, not fired by the current rules: old-rule" in md
    assert "Fired by the current rules, not shown live: kv-exhausted" in md
    assert json.loads(json.dumps(other.to_dict()))["live_finding_ids"] == ["old-rule"]
    assert "live run" not in report.to_markdown(report.build(snaps))
