"""The engine pods of a label selector, kept current by ONE list and then ONE watch (resumed
from its resourceVersion when it drops, a fresh list after 410 Gone), never a request per pod
per poll. While the API is away the last known pods stay, and `status` says how old they are.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from llmtop.core.base.snapshot import FleetEvent, FleetSnapshot, PodRef, Snapshot
from llmtop.core.pipeline.pods import (
    DEFAULT_ENGINE_PORT,
    Pod,
    PodChange,
    PodEvent,
    PoolSpec,
    pod_change,
    pod_changes,
    read_pod,
    read_pool,
    serving_targets,
    upstream_urls,
)
from llmtop.core.pipeline.targets import Target
from llmtop.errors import ConfigError, KubeError, UsageError
from llmtop.settings import MonitorSettings
from llmtop.sources.kube.client import KubeApi
from llmtop.sources.kube.credentials import connect

ALL_NAMESPACES = "all"


class PodDiscovery:
    """`start()` connects and lists; a task then watches. `pods`, `targets()`, `events()`.
    UsageError for both a selector and a pool: every command that follows pods says so."""

    def __init__(
        self,
        selector: str,
        *,
        pool: str | None = None,
        namespace: str | None = None,
        context: str | None = None,
        kubeconfig: str | None = None,
        default_port: int = DEFAULT_ENGINE_PORT,
        clock: Callable[[], float] = time.time,
        retry_s: float = 1.0,
        watch_timeout_s: int = 300,
    ) -> None:
        if selector and pool:
            raise UsageError("give --k8s-selector or --inference-pool, not both")
        self.selector = selector
        """The label selector listed (an InferencePool's, read at `start`, when `pool`)."""
        self.pool = pool
        """The InferencePool whose selector and target port are followed (None: `selector`)."""
        self._pool_port: int | None = None
        self._pool_version: str | None = None
        self._pool_task: asyncio.Task[None] | None = None
        self._namespace_asked = namespace
        self._context = context
        self._kubeconfig = kubeconfig
        self._default_port = default_port
        self._clock = clock
        self._retry_s = retry_s
        self._watch_timeout_s = watch_timeout_s
        self.api: KubeApi | None = None
        self.last_api: KubeApi | None = None
        """The API of the last `start`, kept after `aclose`: its credentials and TLS sign
        requests of one's own (`single.py`) with no client open."""
        self.namespace: str | None = None
        """The namespace listed (None: every namespace); known after `start`."""
        self.server: str | None = None
        """The API server's URL; known after `start` (and kept after `aclose`)."""
        self.in_cluster = False
        """Inside the cluster: pods are read by IP, not through the pod proxy."""
        self.pods: dict[str, Pod] = {}
        """The pods that match, by namespace/name, as last seen."""
        self.error: str | None = None
        """Why the API is away now (None while the watch runs)."""
        self.seen_at: float | None = None
        """When the API last answered (a list, a watch event or a watch opened)."""
        self.lists = 0
        self.watches = 0
        """Requests made: lists and watches (for `status` and the scale test)."""
        self._events: list[PodEvent] = []
        self._version: str | None = None
        self._task: asyncio.Task[None] | None = None
        self._started = False
        self._streaming = False
        """A watch is open (a KubeError now is its connection cut, not the API away)."""
        self.changed = asyncio.Event()
        """Set whenever `pods` changes (a list, a watch event): the gateway's feed waits on it."""

    @classmethod
    def from_settings(cls, monitor: MonitorSettings) -> PodDiscovery:
        """The discovery of --k8s-selector (or --inference-pool), --k8s-namespace,
        --k8s-context, --kubeconfig."""
        assert monitor.k8s_selector is not None or monitor.inference_pool is not None
        return cls(
            monitor.k8s_selector or "",
            pool=monitor.inference_pool,
            namespace=monitor.k8s_namespace,
            context=monitor.k8s_context,
            kubeconfig=monitor.kubeconfig,
        )

    async def start(self) -> None:
        """Connect and list once; KubeError or ConfigError (the CLI's one line) when that
        fails. Then the watch runs in a task of the running loop. Later calls do nothing."""
        if self._started:
            return
        asked = self._namespace_asked
        if self.pool is not None and asked == ALL_NAMESPACES:
            raise ConfigError(
                f"InferencePool {self.pool}: a pool is in one namespace; give --k8s-namespace"
                " NS (or none: the context's), not all"
            )
        api = await connect(kubeconfig=self._kubeconfig, context=self._context)
        self.namespace = None if asked == ALL_NAMESPACES else (asked or api.namespace)
        self.api, self.server, self.in_cluster = api, api.server, api.in_cluster
        self.last_api = api
        try:
            if self.pool is not None:
                self._use_pool(await self._get_pool())
            await self._list(initial=True)
        except BaseException:
            self.api = None
            await api.aclose()
            raise
        self._started = True
        self._task = asyncio.create_task(self._run(), name="llmtop-pod-watch")
        if self.pool is not None:
            self._pool_task = asyncio.create_task(self._run_pool(), name="llmtop-pool-watch")

    async def _get_pool(self) -> PoolSpec:
        """The InferencePool read now; KubeError when it cannot be read, ConfigError when it
        names no pods."""
        assert self.api is not None
        assert self.pool is not None
        assert self.namespace is not None
        obj = await self.api.get_pool(self.namespace, self.pool)
        try:
            return read_pool(obj)
        except ValueError as e:
            raise ConfigError(str(e)) from None

    def _use_pool(self, spec: PoolSpec) -> bool:
        """Follow `spec`'s selector and port; True when they changed (the pods to list again)."""
        self._pool_version = spec.version or self._pool_version
        if (spec.selector, spec.port) == (self.selector, self._pool_port):
            return False
        self.selector, self._pool_port = spec.selector, spec.port
        return True

    async def _run_pool(self) -> None:
        """Watch the InferencePool (one watch, by its name): a changed selector or port lists
        the pods again (those that left the pool are events); a pool deleted keeps the pods
        known, and says so. Resumes and backs off as the pods' watch does."""
        delay = self._retry_s
        while True:
            try:
                if self._pool_version is None:
                    self._pool_changed(await self._get_pool())
                await self._watch_pool()
                delay = self._retry_s
            except KubeError as e:
                if e.status == 410:
                    self._pool_version = None
                    continue
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)
            except ConfigError as e:  # changed to name no pods: keep the last selector
                self._note("pool-changed", f"{e}; keeping the pods of {self.selector}")
                self._pool_version = None
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)
            else:
                await asyncio.sleep(self._retry_s)

    async def _watch_pool(self) -> None:
        assert self.api is not None
        assert self.pool is not None
        assert self.namespace is not None
        assert self._pool_version is not None
        self.watches += 1
        stream = await self.api.watch_pool(
            self.namespace, self.pool, self._pool_version, timeout_s=self._watch_timeout_s
        )
        try:
            async for event in stream:
                obj = event.get("object")
                if not isinstance(obj, dict):
                    continue
                version = (obj.get("metadata") or {}).get("resourceVersion")
                if event.get("type") == "DELETED":
                    self._note(
                        "pool-changed",
                        f"InferencePool {self.namespace}/{self.pool} deleted; keeping the"
                        f" {len(self.pods)} pods known",
                    )
                elif event.get("type") in ("ADDED", "MODIFIED"):
                    try:
                        spec = read_pool(obj)
                    except ValueError as e:
                        self._note("pool-changed", f"{e}; keeping the pods of {self.selector}")
                    else:
                        self._pool_changed(spec)
                if isinstance(version, str) and version:
                    self._pool_version = version
        finally:
            stream.close()

    def _pool_changed(self, spec: PoolSpec) -> None:
        """A pool read anew: when its selector or port moved, an event, and the pods' watch
        starts again from a fresh list."""
        before = (self.selector, self._pool_port)
        if not self._use_pool(spec):
            return
        self._note(
            "pool-changed",
            f"InferencePool {self.namespace}/{self.pool} now selects {spec.selector} on port"
            f" {spec.port} (was {before[0]} on port {before[1]}): pods listed again",
        )
        self._version = None  # the pods' loop lists again, with the new selector and port
        if self._task is not None:
            self._task.cancel()
        self._task = asyncio.create_task(self._run(), name="llmtop-pod-watch")

    def _note(self, kind: PodChange, summary: str) -> None:
        self._events.append(PodEvent(self._clock(), kind, "", summary))
        self.changed.set()

    def targets(self) -> tuple[Target, ...]:
        """The pods Running and Ready now, through the pod proxy (by pod IP in the cluster)."""
        if self.server is None:
            return ()
        proxy = None if self.in_cluster else self.server
        return serving_targets(self.pods, api_server=proxy, qualify=self.namespace is None)

    def upstream_urls(self) -> tuple[str, ...]:
        """The serving pods as the gateway's upstreams: at their IP, or through the pod proxy
        of `kubectl proxy` (an API server on plain HTTP, which adds the credentials) from
        outside the cluster; never with our own token on each request (upstreams.py says why)."""
        via = self.server if self.server and self.server.startswith("http:") else None
        return upstream_urls(self.pods, kubectl_proxy=None if self.in_cluster else via)

    def events(self) -> list[PodEvent]:
        """The pod events since the last call (added, deleted, restarted), oldest first."""
        out, self._events = self._events, []
        return out

    def status(self) -> str | None:
        """None while the API answers; else why not, with the age of the pods still shown."""
        if self.error is None:
            return None
        if self.seen_at is None:
            return self.error
        age = max(0.0, self._clock() - self.seen_at)
        n = len(self.pods)
        return f"{self.error}; showing the {n} pod{'s' * (n != 1)} known {age:.0f} s ago"

    def _away(self, error: str) -> None:
        """The API stopped answering (or refuses): an api-away event the first time."""
        if self.error is None:
            n = len(self.pods)
            summary = f"Kubernetes API away: {error}; still reading the {n} pods known"
            self._events.append(PodEvent(self._clock(), "api-away", "", summary))
            self.changed.set()
        self.error = error

    def _back(self, now: float) -> None:
        """The API answered: an api-back event when it had been away."""
        if self.error is not None:
            away = f" after {now - self.seen_at:.0f} s" if self.seen_at is not None else ""
            summary = f"Kubernetes API back{away}: {len(self.pods)} pods"
            self._events.append(PodEvent(now, "api-back", "", summary))
            self.changed.set()
        self.seen_at, self.error = now, None

    async def _list(self, *, initial: bool) -> None:
        assert self.api is not None
        self.lists += 1
        got = await self.api.list_pods(self.namespace, self.selector)
        now = self._clock()
        pods: dict[str, Pod] = {}
        for obj in got.items:
            with contextlib.suppress(ValueError):
                pod = read_pod(obj, self._default_port, port=self._pool_port)
                pods[pod.key] = pod
        if not initial:
            self._events.extend(pod_changes(self.pods, pods, now))
        self.pods, self._version = pods, got.resource_version
        self.changed.set()
        self._back(now)

    async def _run(self) -> None:
        """Watch from the last version: resume at once when the server ends the watch or its
        connection drops (a proxy's idle cut is no news), list again after 410 Gone; when a
        request fails, the API is away: back off (up to 30 s) and say so."""
        delay = self._retry_s
        while True:
            opened = time.monotonic()
            self._streaming = False
            try:
                if self._version is None:
                    await self._list(initial=False)
                await self._watch()
            except KubeError as e:
                if e.status == 410:
                    self._version = None  # too old to resume from: list again, at once
                    continue
                if not self._streaming:  # the request itself failed: the API is away
                    self._away(str(e))
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 30.0)
                    continue
            delay = self._retry_s
            if time.monotonic() - opened < 1.0:  # ended or cut as soon as it opened: not a
                await asyncio.sleep(self._retry_s)  # loop as fast as the server answers

    async def _watch(self) -> None:
        assert self.api is not None
        assert self._version is not None
        self.watches += 1
        stream = await self.api.watch_pods(
            self.namespace, self.selector, self._version, timeout_s=self._watch_timeout_s
        )
        self._back(self._clock())
        self._streaming = True
        try:
            async for event in stream:
                self._apply(event)
        finally:
            stream.close()

    def _apply(self, event: dict[str, Any]) -> None:
        """One watch event into `pods` (and the events, when it is news)."""
        now = self._clock()
        self._back(now)
        obj = event.get("object")
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        version = meta.get("resourceVersion") if isinstance(meta, dict) else None
        if isinstance(version, str) and version:
            self._version = version
        kind = event.get("type")
        if kind not in ("ADDED", "MODIFIED", "DELETED") or not isinstance(obj, dict):
            return  # BOOKMARK: only its version
        try:
            pod = read_pod(obj, self._default_port, port=self._pool_port)
        except ValueError:
            return
        before = self.pods.get(pod.key)
        after: Pod | None = None
        if kind == "DELETED":
            self.pods.pop(pod.key, None)
        else:
            self.pods[pod.key] = after = pod
        self.changed.set()
        change = pod_change(before, after, now)
        if change is not None:
            self._events.append(change)

    async def aclose(self) -> None:
        """Stop the watches and close the client."""
        for task in (self._pool_task, self._task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._task = self._pool_task = None
        if self.api is not None:
            await self.api.aclose()
            self.api = None

    def to_json(self, replicas: list[dict[str, Any]], events: Iterable[PodEvent]) -> dict[str, Any]:
        """`snapshot --json`'s fleet.kubernetes: what was listed and how, the `events`, and
        each replica row (`replicas`, changed in place) given its `pod`."""
        by_url = {t.url: self.pods.get(_key(t, self.namespace)) for t in self.targets()}
        for row in replicas:
            pod = by_url.get(row.get("parent") or row.get("key") or "")
            if pod is not None:
                row["pod"] = {
                    "namespace": pod.namespace,
                    "name": pod.name,
                    "node": pod.node,
                    "restarts": pod.restarts,
                    "last_reason": pod.last_reason,
                }
        return {
            "server": self.server,
            "namespace": self.namespace or ALL_NAMESPACES,
            "selector": self.selector,
            "inference_pool": self.pool,
            "pods": len(self.pods),
            "serving": sum(p.serving for p in self.pods.values()),
            "error": self.status(),
            "requests": {"list": self.lists, "watch": self.watches},
            "events": [
                {"time": e.time, "kind": e.kind, "pod": e.pod, "summary": e.summary} for e in events
            ],
        }


class FleetPods:
    """The discovery on each poll's fleet: every replica row given its pod (node, restarts),
    and the events of the last ten minutes among the fleet's own (the TUI's log shows them):
    `onto(snapshot)` after each poll."""

    def __init__(self, discovery: PodDiscovery, history_s: float = 600.0) -> None:
        self._discovery = discovery
        self._history_s = history_s
        self.events: deque[PodEvent] = deque()
        """Oldest first, each stamped no later than the poll that took it."""

    def onto(self, snap: Snapshot) -> Snapshot:
        """`snap` with its replicas' pods and the pod events on its fleet; the events seen
        since the last poll are stamped at most at this poll's time, so the log shows each
        once."""
        for e in self._discovery.events():
            self.events.append(replace(e, time=min(e.time, snap.time)))
        while self.events and self.events[0].time < snap.time - self._history_s:
            self.events.popleft()
        if not isinstance(snap, FleetSnapshot) or snap.fleet is None:
            return snap
        d = self._discovery
        pods = {t.url: d.pods.get(_key(t, d.namespace)) for t in d.targets()}
        replicas = tuple(
            replace(r, pod=_ref(pods.get(r.parent or r.key))) for r in snap.fleet.replicas
        )
        single = d.namespace is not None
        mine = [
            FleetEvent(e.time, e.kind, e.pod.split("/", 1)[-1] if single else e.pod, e.summary)
            for e in self.events
        ]
        merged = tuple(sorted((*snap.fleet.events, *mine), key=lambda e: e.time))
        return replace(snap, fleet=replace(snap.fleet, replicas=replicas, events=merged))


def _ref(pod: Pod | None) -> PodRef | None:
    if pod is None:
        return None
    return PodRef(pod.namespace, pod.name, pod.node, pod.restarts, pod.last_reason)


async def preflight(monitor: MonitorSettings) -> None:
    """Connect and list once, then close: before the TUI opens, a wrong context, an expired
    token, an unreachable API or a 403 is the CLI's one line and exit code."""
    discovery = PodDiscovery.from_settings(monitor)
    try:
        await discovery.start()
    finally:
        await discovery.aclose()


def _key(target: Target, namespace: str | None) -> str:
    """The pod key of a target named by `serving_targets`."""
    return target.name if namespace is None else f"{namespace}/{target.name}"
