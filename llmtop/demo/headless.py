"""`llmtop demo --headless`: the scenario's load and the monitor's polls in one loop, printed as a
timeline of events (phases, findings fired and cleared, the cap applied, key figures) or as one
JSON document: the demo's story for a CI log or a terminal without a screen.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from llmtop.core.base.snapshot import Snapshot
from llmtop.core.derive.aggregate import combine
from llmtop.core.health.rulebase import suggested_cap
from llmtop.core.output.incidents import incidents
from llmtop.demo.scenarios import Phase, Scenario
from llmtop.demo.stack import ScenarioDriver, Stack
from llmtop.errors import UsageError
from llmtop.recording.writer import Recorder, RecordingSource

if TYPE_CHECKING:
    from llmtop.sources.gateway import AdminClient


CapPlan = tuple[int | None, float]
"""--apply-cap as (N, T): set max_concurrency to N at T s; N None ('auto') = the cap the active
finding suggests at T (the first poll from T on where one suggests a cap)."""


def parse_cap(text: str, scenario: Scenario) -> CapPlan:
    """'8@60' -> (8, 60.0); 'auto@60' -> (None, 60.0); '8' or 'auto' -> the scenario's time."""
    n_s, sep, t_s = text.partition("@")
    try:
        n = None if n_s.strip() == "auto" else int(n_s)
        t = float(t_s) if sep else scenario.cap_at_s
    except ValueError:
        raise UsageError(
            f"bad --apply-cap {text!r}: expected N@SECONDS or auto@SECONDS, e.g. 8@60"
        ) from None
    if t is None:
        raise UsageError(
            f"--apply-cap {text!r}: scenario {scenario.name} has no cap time; use N@T or auto@T"
        )
    if (n is not None and n < 1) or t < 0:
        raise UsageError(f"bad --apply-cap {text!r}: need N >= 1 and T >= 0")
    return n, t


def describe_cap(cap: CapPlan | None) -> str:
    """The plan in words, for the headless run's first line."""
    if cap is None:
        return "no cap (try --apply-cap auto@T)"
    n, t = cap
    if n is None:
        return f"at {t:g} s, the cap the active finding suggests"
    return f"cap {n} at {t:g} s"


def finding_events(t: float, prev: Snapshot | None, cur: Snapshot) -> list[dict[str, Any]]:
    """finding_fired / finding_cleared events between two polls (core.output.incidents), at `t`."""
    events: list[dict[str, Any]] = []
    for i in incidents(prev, cur):
        f = i.finding
        if f is None:
            continue
        if i.kind == "finding_fired":
            events.append(
                {
                    "t": t,
                    "kind": "finding_fired",
                    "id": f.id,
                    "severity": f.severity,
                    "bottleneck": f.bottleneck,
                    "summary": f.summary,
                    "action": f.action,
                }
            )
        elif i.kind == "finding_cleared":
            events.append({"t": t, "kind": "finding_cleared", "id": f.id, "summary": f.summary})
    return events


def figures(t: float, snap: Snapshot) -> dict[str, Any]:
    """The key figures of one poll (None = unknown); several engines combined as one."""
    e = combine(snap.engines)
    g = snap.gateway
    return {
        "t": t,
        "kind": "figures",
        "status": snap.status,
        "running": e.running if e else None,
        "waiting": e.waiting if e else None,
        "kv_cache_usage_frac": e.kv_cache_usage_frac if e else None,
        "ttft_p95_s": e.ttft_p95_s if e else None,
        "decode_tok_per_s": e.decode_tok_per_s if e else None,
        "preemptions_per_s": e.preemptions_per_s if e else None,
        "gateway_queued": g.queued if g else None,
        "gateway_in_flight": g.in_flight if g else None,
        "gateway_max_concurrency": g.max_concurrency if g else None,
        "gateway_ttft_p95_s": g.ttft_p95_s if g else None,
        "findings": [f.id for f in snap.findings],
    }


def _n(v: float | None, fmt: str = ".0f") -> str:
    return "n/a" if v is None else format(v, fmt)


def format_event(ev: dict[str, Any]) -> str:
    """One event as a line (or two) for a terminal or a CI log."""
    head = f"t={ev['t']:6.1f}s  "
    kind = ev["kind"]
    if kind == "phase":
        return f"{head}phase    {ev['name']}: {ev['note']}"
    if kind == "finding_fired":
        return (
            f"{head}FIRED    {ev['id']} [{ev['severity']}/{ev['bottleneck']}] {ev['summary']}\n"
            f"{' ' * 19}action: {ev['action']}"
        )
    if kind == "finding_cleared":
        return f"{head}CLEARED  {ev['id']}"
    if kind == "cap_applied":
        why = f" (what {ev['finding']} suggests)" if ev.get("finding") else ""
        return (
            f"{head}CAP      gateway max_concurrency {ev['from']} -> {ev['max_concurrency']}{why}"
        )
    if kind == "cap_waiting":
        return f"{head}CAP      no finding suggests a cap yet: applying the first one that does"
    if kind == "figures":
        kv = ev["kv_cache_usage_frac"]
        ttft = ev["ttft_p95_s"]
        return (
            f"{head}figures  running {_n(ev['running'])}  waiting {_n(ev['waiting'])}"
            f"  kv {'n/a' if kv is None else f'{kv:.0%}'}"
            f"  ttft_p95 {'n/a' if ttft is None else f'{ttft:.2f}s'}"
            f"  decode {_n(ev['decode_tok_per_s'])} tok/s"
            f"  gateway {_n(ev['gateway_queued'])} queued / {_n(ev['gateway_in_flight'])}"
            f" in flight (cap {_n(ev['gateway_max_concurrency'])})"
            f"  [{ev['status']}{': ' + ', '.join(ev['findings']) if ev['findings'] else ''}]"
        )
    return f"{head}{kind}  {ev}"


async def headless(
    stack: Stack,
    duration_s: float,
    *,
    cap: CapPlan | None = None,
    figures_every_s: float = 5.0,
    emit: Callable[[dict[str, Any]], None] | None = None,
    stop: asyncio.Event | None = None,
    seed: int = 0,
    recorder: Recorder | None = None,
) -> tuple[list[dict[str, Any]], ScenarioDriver]:
    """Run the scenario for `duration_s`, polling the monitor each interval; returns the events
    (phase, finding_fired, finding_cleared, cap_waiting, cap_applied, figures) and the driver
    (load results).
    Polls go through the TUI's source (RecordingSource), so an open `recorder` gets every one."""
    from llmtop.sources.collector import Collector
    from llmtop.sources.gateway import AdminClient

    events: list[dict[str, Any]] = []

    def add(ev: dict[str, Any]) -> None:
        events.append(ev)
        if emit is not None:
            emit(ev)

    start = time.monotonic()

    def on_phase(_: float, i: int, p: Phase) -> None:
        t = round(time.monotonic() - start, 1)
        add({"t": t, "kind": "phase", "index": i, "name": p.name, "note": p.note})

    driver = ScenarioDriver(stack.scenario, stack.gateway.url, seed=seed, on_phase=on_phase)
    collector = Collector(stack.monitor, stack.health, max_num_seqs=stack.engine_max_num_seqs)
    source = RecordingSource(collector, recorder or Recorder.from_settings(stack.monitor))
    admin = AdminClient(stack.gateway.url, source="demo")
    stop = stop or asyncio.Event()
    load = asyncio.ensure_future(driver.run(duration_s))
    next_figures = 0.0
    cap_waiting = False
    interval = stack.monitor.interval_s
    last: tuple[float, Snapshot] | None = None
    shown = -1.0
    try:
        tick = start
        while not stop.is_set() and not load.done():
            t = round(time.monotonic() - start, 1)
            if t >= duration_s:
                break
            snap = await source.poll()
            for ev in finding_events(t, last[1] if last else None, snap):
                add(ev)
            last = (t, snap)
            if cap is not None and t >= cap[1]:
                applied = await _apply_cap(admin, cap[0], t, snap, add, waiting=cap_waiting)
                cap_waiting = not applied
                if applied:
                    cap = None
            if t >= next_figures:
                add(figures(t, snap))
                shown = t
                next_figures += figures_every_s
            tick += interval
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), max(0.0, tick - time.monotonic()))
        if last is not None and last[0] != shown:
            add(figures(*last))  # the state the run ended in
    finally:
        driver.stop()
        await load
        await source.aclose()
        await admin.aclose()
    return events, driver


async def _apply_cap(
    admin: AdminClient,
    n: int | None,
    t: float,
    snap: Snapshot,
    add: Callable[[dict[str, Any]], None],
    *,
    waiting: bool,
) -> bool:
    """Set the gateway's cap to `n`, or (n None) to what the active finding suggests in `snap`;
    False when no finding suggests one yet (said once, then tried again at the next poll)."""
    event: dict[str, Any] = {"t": t, "kind": "cap_applied"}
    if n is None:
        advice = suggested_cap(snap.findings)
        if advice is None:
            if not waiting:
                add({"t": t, "kind": "cap_waiting"})
            return False
        n, finding = advice
        event |= {"finding": finding.id, "action": finding.action}
    before = snap.gateway.max_concurrency if snap.gateway else None
    await admin.set_limits(max_concurrency=n)
    add(event | {"max_concurrency": n, "from": before})
    return True


def open_recorder(stack: Stack) -> Recorder:
    """The stack's Recorder, open when --record was given (a closed one writes nothing)."""
    recorder = Recorder.from_settings(stack.monitor)
    if stack.monitor.record:
        recorder.open()
    return recorder


def run_headless(
    stack: Stack,
    duration_s: float | None,
    cap: CapPlan | None,
    *,
    seed: int,
    as_json: bool,
) -> int:
    """Run the scenario for `duration_s` (default: one pass), print the timeline and the load's
    summary (or one JSON document); 130 when Ctrl-C cut it short, else 0."""
    import json
    import signal
    import sys

    from llmtop.load.stats import Slo, format_table, summarize, to_json

    duration = duration_s if duration_s is not None else stack.scenario.cycle_s
    interrupted = False
    recorder = open_recorder(stack)

    def emit(ev: dict[str, Any]) -> None:
        if not as_json:
            sys.stdout.write(format_event(ev) + "\n")
            sys.stdout.flush()

    async def main() -> tuple[list[dict[str, Any]], Any]:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()

        def on_sigint() -> None:
            nonlocal interrupted
            interrupted = True
            stop.set()
            loop.remove_signal_handler(signal.SIGINT)

        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signal.SIGINT, on_sigint)
        return await headless(
            stack, duration, cap=cap, emit=emit, stop=stop, seed=seed, recorder=recorder
        )

    if not as_json:
        sys.stdout.write(stack.banner() + "\n")
        sys.stdout.write(f"running headless for {duration:g} s, {describe_cap(cap)}\n")
        sys.stdout.flush()
    try:
        events, driver = asyncio.run(main())
    finally:
        recorder.close()
    if recorder.error:
        sys.stderr.write(f"llmtop: recording stopped: {recorder.error}\n")
    slo = Slo(ttft_s=stack.health.slo.ttft_s, itl_s=stack.health.slo.itl_s)
    summary = summarize(driver.results, driver.runner.elapsed(), slo)
    fired = sorted({e["id"] for e in events if e["kind"] == "finding_fired"})
    cleared = sorted({e["id"] for e in events if e["kind"] == "finding_cleared"})
    if as_json:
        doc = {
            "scenario": stack.scenario.name,
            "dialect": stack.dialect,
            "sim_url": stack.sim.url,
            "gateway_url": stack.gateway.url,
            "duration_s": duration,
            "apply_cap": None
            if cap is None
            else {"max_concurrency": "auto" if cap[0] is None else cap[0], "at_s": cap[1]},
            "interrupted": interrupted,
            "fired": fired,
            "cleared": cleared,
            "events": events,
            "load": to_json(summary),
        }
        sys.stdout.write(json.dumps(doc, indent=1) + "\n")
    else:
        none = "none"
        sys.stdout.write(
            f"\nfindings fired: {', '.join(fired) or none}; cleared: {', '.join(cleared) or none}"
            f"\nload seen by the clients (through the gateway):\n{format_table(summary)}\n"
        )
    return 130 if interrupted else 0
