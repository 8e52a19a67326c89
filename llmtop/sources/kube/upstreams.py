"""The gateway's upstreams from Kubernetes: the Ready engine pods of a label selector (or an
InferencePool), as the gateway's upstream feed (`gateway.server.upstream_feed.UpstreamFeed`, by
shape: this layer does not import the gateway; `commands/gateway.py` joins the two).

Where the gateway sends user traffic: each pod's IP and API port, the production path (inside
the cluster, or wherever the pod network is routed). Through the API server's pod proxy only
when that is `kubectl proxy` (a kubeconfig whose server is its plain-HTTP address), which adds
the credentials itself: to try the gateway from a laptop, and for the tests. Never with our own
token on each request: the Authorization header is then the API server's, an engine's own API
key cannot pass, and every token of every answer would load the API server.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

from llmtop.errors import ConfigError, KubeError, UsageError
from llmtop.settings import GatewaySettings

if TYPE_CHECKING:
    from llmtop.sources.kube.discovery import PodDiscovery


def follow_pods(settings: GatewaySettings) -> tuple[GatewaySettings, PodUpstreams | None]:
    """`llmtop gateway --k8s-selector/--inference-pool`: the settings with the Ready pods of
    now as `upstream`, and the feed that follows them; `settings` as they are, and no feed,
    without those flags (the Kubernetes client is then not even imported)."""
    if not (settings.k8s_selector or settings.inference_pool):
        return settings, None
    if settings.upstream != GatewaySettings.upstream:
        raise UsageError("give --vllm (LLMTOP_UPSTREAM) or the Kubernetes pods to follow, not both")
    feed = PodUpstreams(
        settings.k8s_selector,
        pool=settings.inference_pool,
        namespace=settings.k8s_namespace,
        context=settings.k8s_context,
        kubeconfig=settings.kubeconfig,
    )
    urls = asyncio.run(feed.first())
    return dataclasses.replace(settings, upstream=",".join(urls)), feed


class PodUpstreams:
    """`first()` before the gateway serves (a wrong context or a 403 is the CLI's one line);
    then the gateway iterates `updates()` and reads `notes()`."""

    def __init__(self, selector: str | None, retry_s: float = 1.0, **kwargs: Any) -> None:
        self._selector = selector
        self._kwargs = kwargs
        self._retry_s = retry_s
        self._first: tuple[str, ...] = ()
        self._notes: list[str] = []
        self.discovery: PodDiscovery | None = None
        """The discovery the gateway follows (None before `updates` starts it)."""
        pool = kwargs.get("pool")
        ns = kwargs.get("namespace") or "the context's namespace"
        self.description = f"InferencePool {pool} in {ns}" if pool else f"pods {selector} in {ns}"

    def _discovery(self) -> PodDiscovery:
        from llmtop.sources.kube.discovery import PodDiscovery  # the client: ~1.5 s to import

        return PodDiscovery(self._selector or "", retry_s=self._retry_s, **self._kwargs)

    async def first(self) -> tuple[str, ...]:
        """Connect, list once and close: the upstreams now (maybe none Ready yet); KubeError
        or ConfigError when the API cannot be used as asked."""
        d = self._discovery()
        try:
            await d.start()
            self._first = d.upstream_urls()
            self.description = _describe(d)
        finally:
            await d.aclose()
        return self._first

    async def updates(self) -> AsyncIterator[Sequence[str]]:
        """The upstreams now, then at each change of the pods (or news for the log). Until the
        API answers the set of `first()` holds, and why is a note."""
        d = self._discovery()
        delay = self._retry_s
        while True:
            try:
                await d.start()
                break
            except (KubeError, ConfigError) as e:
                self._notes.append(f"Kubernetes: {e}; keeping the {len(self._first)} upstreams")
                yield self._first
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)
        self.discovery = d
        try:
            last: tuple[str, ...] | None = None
            while True:
                d.changed.clear()
                urls = d.upstream_urls()
                self._notes.extend(e.summary for e in d.events())
                if urls != last or self._notes:
                    last = urls
                    yield urls
                await d.changed.wait()
        finally:
            await d.aclose()

    def notes(self) -> list[str]:
        """What the discovery saw since the last call (a pod came, left, restarted; the API
        away or back), oldest first."""
        out, self._notes = self._notes, []
        return out


def _describe(d: PodDiscovery) -> str:
    ns = d.namespace or "every namespace"
    return f"InferencePool {d.pool} in {ns}" if d.pool else f"pods {d.selector} in {ns}"


__all__ = ["PodUpstreams", "follow_pods"]
