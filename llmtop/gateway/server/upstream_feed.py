"""Upstreams that come and go: a feed (Kubernetes' Ready engine pods, wired in
`commands/gateway.py`; the gateway knows no Kubernetes) yields its whole set of base URLs each
time it changes, and `follow`, one task in the app's lifespan, makes the balancer's replicas that
set (`Balancer.follow`: a new one joins rotation at its first /health answer, one that left
drains, then goes). Each move is a replica event and a log line (`replica_watch`); what the feed
itself saw (a pod restarted, its API away) is a log line too."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from typing import Protocol

from llmtop.gateway.server.context import GatewayContext
from llmtop.gateway.upstreams.balancer import DRAINING

log = logging.getLogger("llmtop.gateway")


class UpstreamFeed(Protocol):
    """Where the upstreams come from when they change."""

    description: str
    """What it follows, for the banner and the log (`pods app=vllm in llm`)."""

    def updates(self) -> AsyncIterator[Sequence[str]]:
        """The whole set of upstream base URLs, first as it is now, then at each change; it
        keeps its own connection (an API away is the feed's to retry, the last set holds)."""
        ...

    def notes(self) -> list[str]:
        """What the feed saw since the last call, one log line each, oldest first."""
        ...


async def follow(state: GatewayContext, feed: UpstreamFeed) -> None:
    """Keep the replicas equal to the feed's set until cancelled (by the lifespan). A feed
    that ends or fails leaves the replicas as they were, and says so once."""
    bal = state.balancer
    try:
        async for urls in feed.updates():
            for note in feed.notes():
                log.info("llmtop gateway: %s", note)
            bal.follow(urls)
            live = [r.url for r in bal.replicas if r.state != DRAINING]
            if live:  # the autopilot and the /healthz probe read one live replica
                state.base_url = state.upstream.url = live[0]
            state.apply_shares()
    except Exception as e:  # an injected feed's bug must not stop the gateway
        log.warning(
            "llmtop gateway: the upstream feed (%s) failed: %s: %s; the %d replicas stay",
            feed.description,
            type(e).__name__,
            e,
            len(bal.replicas),
        )
        return
    log.warning(
        "llmtop gateway: the upstream feed (%s) ended; the %d replicas stay",
        feed.description,
        len(bal.replicas),
    )


__all__ = ["UpstreamFeed", "follow"]
