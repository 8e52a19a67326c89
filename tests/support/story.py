"""The demo story, recorded from a real run, replayed at chosen moments: the data of the TUI
snapshot tests and of scripts/screenshots.

tests/fixtures/demo-story.jsonl.gz is `llmtop demo --headless --scenario story --duration-s 245
--apply-cap auto@150 --record FILE`: the simulated engine, the gateway, the load and the Collector,
each poll's raw inputs recorded. Replaying it runs them through a fresh Pipeline, so every
number and every finding on a rendered screen is what the product computes at that moment with
today's rules; nothing here writes a finding, a text or an advice. `MOMENTS` only names the
times; tests/tui/test_story.py checks each name against what the rules say there.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from pathlib import Path

from llmtop.core.base.snapshot import Snapshot
from llmtop.recording.reader import Recording, read_recording
from llmtop.recording.replay import ReplaySource
from llmtop.settings import HealthSettings, MonitorSettings
from llmtop.sources.gateway import AdminClient
from llmtop.tui.app import HISTORY_S, LlmtopApp
from llmtop.tui.controls import Recorder
from llmtop.tui.view.source import SnapshotSource
from llmtop.whatif.feed import SnapshotsWithWhatIf, WhatIfFeed

STORY = Path(__file__).resolve().parents[1] / "fixtures" / "demo-story.jsonl.gz"

MOMENTS: dict[str, float] = {
    "healthy": 65.0,
    "degrading": 74.0,
    "batching-cliff": 108.0,
    "kv-exhausted": 145.0,
    "after-cap": 200.0,
}
"""Seconds into the recording: 32 chats served well; the KV cache filling at 64 chats; 24
4,000-token prompts on top (the throughput flat while waiting grows); TTFT near 40 s with 0
errors, just before the cap; 50 s after the cap, the queue in the gateway."""


@functools.cache
def recording() -> Recording:
    """The story's recording, read once (replays do not change it)."""
    return read_recording(STORY)


@functools.cache
def snapshots() -> tuple[Snapshot, ...]:
    """Every poll of the story as the current rules compute it."""
    return tuple(ReplaySource(recording(), HealthSettings()).snapshots())


def start() -> float:
    """Time of the story's first poll."""
    return recording().times[0]


def index_at(at_s: float) -> int:
    """The poll shown `at_s` seconds into the story."""
    return recording().index_at(start() + at_s)


def upto(at_s: float) -> list[Snapshot]:
    """The story from its first poll to the one shown at `at_s`."""
    return list(snapshots()[: index_at(at_s) + 1])


def replay_at(at_s: float, health: HealthSettings | None = None) -> ReplaySource:
    """A paused replay of the story at `at_s`: its poll() answers that moment for ever."""
    source = ReplaySource(recording(), health or HealthSettings(), paused=True)
    source.step(index_at(at_s))
    return source


def monitor(**kw: object) -> MonitorSettings:
    """The monitor the demo ran: the recorded targets."""
    targets = recording().header.get("targets") or {}
    base: dict[str, object] = {
        "vllm_urls": tuple(targets.get("vllm") or ()),
        "gateway_url": targets.get("gateway"),
        "nvml": False,
    }
    base.update(kw)
    return MonitorSettings(**base)  # type: ignore[arg-type]


def app_at(
    at_s: float,
    *,
    source: SnapshotSource | None = None,
    history: Sequence[Snapshot] | None = None,
    admin: AdminClient | None = None,
    health: HealthSettings | None = None,
    clock: Callable[[], float] = lambda: 0.0,
    recorder: Recorder | None = None,
    app_class: type[LlmtopApp] = LlmtopApp,
    whatif: WhatIfFeed | None = None,
    exit_after_s: float | None = None,
    **monitor_kw: object,
) -> LlmtopApp:
    """The live screen as it stood `at_s` seconds into the story: a paused replay as its source
    (or `source`; with `whatif` joined to it, as the live wiring does), the window before it
    preloaded (charts, event log), a frozen age clock."""
    health = health or HealthSettings()
    replay = replay_at(at_s, health)
    if admin is not None:
        monitor_kw.setdefault("gateway_url", admin.base_url)
    polled: SnapshotSource = replay if source is None else source
    return app_class(
        polled if whatif is None else SnapshotsWithWhatIf(polled, whatif),
        monitor=monitor(**monitor_kw),
        health=health,
        admin=admin,
        clock=clock,
        recorder=recorder,
        history=replay.history(HISTORY_S) if history is None else history,
        exit_after_s=exit_after_s,
    )
