"""The fleet collector: many targets (or one Prometheus) through the per-replica pipeline.

Used where `sources.collector.is_fleet` (several engines, `--targets`, `--prometheus`); one
engine keeps the plain `Collector`, which reads the gateway and GPUs the same way.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any

from llmtop.core.base.raw import RawEngine, RawPoll
from llmtop.core.base.snapshot import Fleet, FleetSnapshot, Snapshot
from llmtop.core.base.window import WindowSnapshot
from llmtop.core.output.fleet_json import fleet_json
from llmtop.core.pipeline.fleet import FleetPipeline
from llmtop.core.pipeline.targets import Target, targets_from_urls
from llmtop.core.pipeline.verdict import judge_window
from llmtop.core.promql.promql_answers import prometheus_replicas
from llmtop.settings import HealthSettings, MonitorSettings
from llmtop.sources.collector import Collector
from llmtop.sources.direct import FleetScraper
from llmtop.sources.prometheus import PrometheusSource
from llmtop.sources.targets_file import TargetsFile

if TYPE_CHECKING:
    from llmtop.sources.kube.discovery import FleetPods, PodDiscovery


class FleetCollector(Collector):
    """A Collector whose engines are a fleet: per-replica rows in `fleet`, one Snapshot a poll."""

    def __init__(self, monitor: MonitorSettings, health: HealthSettings, **kwargs: Any) -> None:
        super().__init__(monitor, health, **kwargs)
        self.pipeline: FleetPipeline = FleetPipeline(
            health, window_s=kwargs.get("window_s"), max_num_seqs=kwargs.get("max_num_seqs")
        )
        self._file = TargetsFile(monitor.targets_file) if monitor.targets_file else None
        self._static = targets_from_urls(monitor.vllm_urls)
        if self._file is not None:
            self._file.current()  # a bad file is an error at start, naming the line
        self.pods: PodDiscovery | None = None
        """The Kubernetes pods of --k8s-selector, when given: the targets, through the pod proxy."""
        self.fleet_pods: FleetPods | None = None
        """Their pods (node, restarts) and events (came, left, restarted; the API away), on
        each poll's fleet."""
        http = None
        if monitor.k8s_selector or monitor.inference_pool:
            from llmtop.sources.kube.discovery import (  # the client: ~1.5 s to import
                FleetPods,
                PodDiscovery,
            )
            from llmtop.sources.kube.proxy import PodProxyClient

            self.pods = PodDiscovery.from_settings(monitor)
            self.fleet_pods = FleetPods(self.pods)
            http = PodProxyClient(
                self.pods, timeout_s=self.timeout_s, max_bytes=monitor.max_scrape_bytes
            )
        self._scraper = FleetScraper(
            timeout_s=self.timeout_s,
            max_bytes=monitor.max_scrape_bytes,
            narrow=monitor.narrow_scrape,
            http=http,
            kind=monitor.engine_kind,
        )
        self.prometheus: PrometheusSource | None = None
        if monitor.prometheus_url:
            self.prometheus = PrometheusSource(
                monitor.prometheus_url,
                selector=monitor.prometheus_selector,
                window_s=monitor.prometheus_window_s,
                replica_label=monitor.prometheus_replica_label,
                timeout_s=self.timeout_s,
            )

    @property
    def fleet(self) -> Fleet | None:
        """The last poll's replicas, totals and fleet findings."""
        return self.pipeline.fleet

    def targets(self) -> tuple[Target, ...]:
        """The engines scraped directly now (none when reading Prometheus)."""
        if self.prometheus is not None:
            return ()
        if self.pods is not None:
            return self.pods.targets()
        return self._file.current() if self._file is not None else self._static

    async def _engines(self) -> tuple[RawEngine, ...]:
        """Every target at once, through the fleet scraper; their names go to the pipeline.
        The first poll of Kubernetes pods lists them (KubeError or ConfigError when it cannot)."""
        if self.pods is not None:
            await self.pods.start()
        targets = self.targets()
        self.pipeline.names = {x.url: x.name for x in targets}
        return await self._scraper.scrape_all([x.url for x in targets])

    async def poll(self) -> Snapshot:
        """read() (and Prometheus' answers, kept in the RawPoll for --record) through the fleet
        pipeline."""
        if self.prometheus is None:
            raw = await self.read()
        else:
            raw, answers = await asyncio.gather(self.read(), self.prometheus.read_answers())
            raw = replace(raw, prometheus=answers)
        self.last_raw = raw
        snap = self.pipeline.update(raw, prometheus_replicas(raw))
        return snap if self.fleet_pods is None else self.fleet_pods.onto(snap)

    async def aclose(self) -> None:
        """Close the scraper, the Prometheus client and what the plain collector holds."""
        await self._scraper.aclose()
        if self.pods is not None:
            await self.pods.aclose()
        if self.prometheus is not None:
            await self.prometheus.aclose()
        await super().aclose()


async def take_fleet_snapshot(
    monitor: MonitorSettings, health: HealthSettings, window_s: float
) -> tuple[WindowSnapshot, dict[str, Any]]:
    """`llmtop snapshot` of a fleet: polls across the window, then its verdict and {"fleet": every
    replica with its figures and findings}; through Prometheus (no engines scraped) the verdict is
    the fleet's last Snapshot.
    """
    judged = replace(health, fire_after_s=0.0, clear_after_s=0.0, window_s=window_s)
    collector = FleetCollector(monitor, judged, timeout_s=min(5.0, max(1.0, window_s * 0.8)))
    polls: list[RawPoll] = []
    try:
        start = time.monotonic()
        while True:
            snap = await collector.poll()
            assert collector.last_raw is not None
            polls.append(collector.last_raw)
            elapsed = time.monotonic() - start
            if elapsed >= window_s or (len(polls) == 1 and not any(e.up for e in snap.engines)):
                break
            await asyncio.sleep(min(monitor.interval_s, window_s - elapsed))
    finally:
        await collector.aclose()
    fleet = collector.fleet
    if collector.prometheus is not None:
        report = WindowSnapshot(
            last=snap, start=polls[0].time, polls=len(polls), interval_s=monitor.interval_s
        )
    else:  # the window judged per replica and across them: status and exit code included
        named = partial(_named_pipeline, dict(collector.pipeline.names))
        report = judge_window(polls, health, monitor.interval_s, pipeline_class=named)
        if isinstance(report.last, FleetSnapshot) and report.last.fleet is not None:
            fleet = report.last.fleet  # the verdict's own poll, as the top-level figures
    if fleet is None:
        return report, {}
    doc = _with_scrapes(fleet_json(fleet), collector)
    if collector.pods is not None and collector.fleet_pods is not None:
        doc["kubernetes"] = collector.pods.to_json(doc["replicas"], collector.fleet_pods.events)
    return report, {"fleet": doc}


def _named_pipeline(names: dict[str, str], settings: HealthSettings) -> FleetPipeline:
    """A FleetPipeline that names the replicas as the collector did (a targets file's names,
    pods), for the window's verdict."""
    pipeline = FleetPipeline(settings)
    pipeline.names = names
    return pipeline


def _with_scrapes(doc: dict[str, Any], collector: FleetCollector) -> dict[str, Any]:
    """Each replica's "scrape": "narrow" when its server is asked for only the series llmtop
    reads (`core.exposition.narrow`), "full" when it is read whole; null through Prometheus."""
    for row in doc["replicas"]:
        url = row["parent"] or row["key"]
        if collector.prometheus is not None:
            row["scrape"] = None
        else:
            row["scrape"] = "full" if collector._scraper.narrow_url(url) is None else "narrow"
    return doc
