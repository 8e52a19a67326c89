"""Three replicas, one drowning, recorded from a real run and replayed: the data of the replica
table's snapshot tests and of the README's screenshot (scripts/screenshots).

tests/fixtures/fleet-3-sims.jsonl.gz is `llmtop --vllm A --vllm B --vllm C --gateway off
--record FILE` in tmux for 82 s, watching three `llmtop sim`s on loopback: A under
`llmtop load --concurrency 48 --prompt-tokens 1500 --output-tokens 256` (its load ended ~64 s
in), B and C under `--concurrency 2 --prompt-tokens 500`. Replaying it runs every poll through
a fresh FleetPipeline: the rows, totals and findings on a rendered screen are what the product
computes from the recorded scrapes with today's rules; nothing here writes a figure or a text.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

from llmtop.core.base.snapshot import FleetSnapshot, Snapshot
from llmtop.recording.reader import Recording, read_recording
from llmtop.recording.replay import ReplaySource
from llmtop.settings import HealthSettings, MonitorSettings
from llmtop.sources.gateway import AdminClient
from llmtop.tui.app import HISTORY_S, LlmtopApp

FLEET = Path(__file__).resolve().parents[1] / "fixtures" / "fleet-3-sims.jsonl.gz"

OVERLOADED_S = 40.0
"""Seconds into the recording: replica A under its load for well over a minute."""


@functools.cache
def recording() -> Recording:
    """The fleet's recording, read once."""
    return read_recording(FLEET)


@functools.cache
def snapshots() -> tuple[Snapshot, ...]:
    """Every poll as the current rules compute it (the replay's FleetPipeline)."""
    return tuple(ReplaySource(recording(), HealthSettings()).snapshots())


def index_at(at_s: float) -> int:
    """The poll shown `at_s` seconds into the recording."""
    rec = recording()
    return rec.index_at(rec.times[0] + at_s)


def at(at_s: float) -> FleetSnapshot:
    """The fleet's Snapshot `at_s` seconds in."""
    snap = snapshots()[index_at(at_s)]
    assert isinstance(snap, FleetSnapshot)
    return snap


def monitor() -> MonitorSettings:
    """The monitor the run used: the recorded targets, no gateway, no GPU."""
    targets = recording().header.get("targets") or {}
    return MonitorSettings(vllm_urls=tuple(targets.get("vllm") or ()), gateway_url=None, nvml=False)


def app_at(
    at_s: float, *, clock: Callable[[], float] = lambda: 0.0, admin: AdminClient | None = None
) -> LlmtopApp:
    """The live screen `at_s` seconds into the run: a paused replay as its source, the window
    before it preloaded, a frozen age clock; `admin` for the keys that change a gateway."""
    source = ReplaySource(recording(), HealthSettings(), paused=True)
    source.step(index_at(at_s))
    return LlmtopApp(
        source,
        monitor=monitor(),
        health=HealthSettings(),
        admin=admin,
        clock=clock,
        history=source.history(HISTORY_S),
    )
