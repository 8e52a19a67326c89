"""The run of issue 28.3: a burst sent to a gateway at a low cap in front of a healthy sim,
watched as the TUI watches it (the Collector and its pipeline, one poll a second, recorded when
asked), the cap raised after a while. Shared by tests/integration/test_gateway_queue_finding.py
and scripts/record-gateway-queue (which made tests/fixtures/gateway-queue.jsonl.gz).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness.http_ready import wait_ready
from llmtop.core.base.snapshot import Snapshot
from llmtop.recording.writer import Recorder, RecordingSource
from llmtop.serve.stack import free_port
from llmtop.settings import HealthSettings, MonitorSettings
from llmtop.sources.collector import Collector
from llmtop.sources.gateway import AdminClient


@dataclass
class Burst:
    """The load: `requests` streams at once, each `prompt` tokens in and `output` out."""

    requests: int = 32
    prompt: int = 4000
    output: int = 256
    duration_s: float = 60.0


@dataclass
class Watched:
    """What one poll a second saw: the snapshots, and when the burst started and the cap moved."""

    snaps: list[Snapshot] = field(default_factory=list)
    onset: float | None = None
    """Time of the first poll that saw a request queued in the gateway."""
    raised: float | None = None


def load_command(url: str, burst: Burst) -> list[str]:
    """`llmtop load` sending the burst: every stream at once, bounded."""
    return [
        sys.executable, "-m", "llmtop", "load", "--url", url,
        "--concurrency", str(burst.requests), "--requests", str(burst.requests),
        "--prompt-tokens", str(burst.prompt), "--output-tokens", str(burst.output),
        "--duration-s", f"{burst.duration_s:g}", "--json",
    ]  # fmt: skip


async def watch_burst(
    sim_url: str,
    gateway_url: str,
    burst: Burst,
    *,
    watch_s: float,
    raise_to: int,
    raise_after_s: float,
    record: Path | None = None,
    health: HealthSettings | None = None,
) -> Watched:
    """Send the burst, poll once a second for `watch_s`, and set the gateway's cap to
    `raise_to` `raise_after_s` after the onset; the load is stopped at the end."""
    monitor = MonitorSettings(
        vllm_urls=(sim_url,),
        gateway_url=gateway_url,
        nvml=False,
        interval_s=1.0,
        record=str(record) if record else None,
    )
    collector = Collector(monitor, health or HealthSettings())
    recorder = Recorder.from_settings(monitor) if record else None
    source: Collector | RecordingSource = collector
    if recorder is not None:
        recorder.open()
        source = RecordingSource(collector, recorder)
    admin = AdminClient(gateway_url, None)
    seen = Watched()
    load = await asyncio.create_subprocess_exec(
        *load_command(gateway_url, burst),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        start = time.monotonic()
        while time.monotonic() - start < watch_s:
            tick = time.monotonic()
            snap = await source.poll()
            seen.snaps.append(snap)
            gw = snap.gateway
            if seen.onset is None and gw is not None and (gw.queued or 0) > 0:
                seen.onset = snap.time - (gw.oldest_queued_s or 0.0)
            if (
                seen.onset is not None
                and seen.raised is None
                and snap.time - seen.onset >= raise_after_s
            ):
                await admin.set_limits(max_concurrency=raise_to)
                seen.raised = time.time()
            await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))
    finally:
        if load.returncode is None:
            load.terminate()
        try:
            await asyncio.wait_for(load.wait(), 10)
        except asyncio.TimeoutError:
            load.kill()
            await load.wait()
        await admin.aclose()
        await source.aclose()
    return seen


class Stack:
    """`llmtop sim` and `llmtop gateway` as processes on free loopback ports (as a user runs
    them: a process each, so neither starves the other or the test of its interpreter)."""

    def __init__(self, sim_args: tuple[str, ...] = (), gateway_args: tuple[str, ...] = ()):
        self.sim_port, self.gw_port = free_port(), free_port()
        self.sim_url = f"http://127.0.0.1:{self.sim_port}"
        self.gateway_url = f"http://127.0.0.1:{self.gw_port}"
        self.sim_args, self.gateway_args = sim_args, gateway_args
        self.procs: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> Stack:
        llmtop = [sys.executable, "-m", "llmtop"]
        quiet = subprocess.DEVNULL
        self.procs.append(
            subprocess.Popen(
                [*llmtop, "sim", "--port", str(self.sim_port), *self.sim_args],
                stdout=quiet,
                stderr=quiet,
            )
        )
        # the engine up first: a gateway that checks it before it listens ejects it for 5 s
        wait_ready(self.sim_url + "/health")
        self.procs.append(
            subprocess.Popen(
                [*llmtop, "gateway", "--vllm", self.sim_url, "--listen",
                 f"127.0.0.1:{self.gw_port}", *self.gateway_args],
                stdout=quiet,
                stderr=quiet,
            )
        )  # fmt: skip
        wait_ready(self.gateway_url + "/healthz")
        return self

    def __exit__(self, *exc: object) -> None:
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
