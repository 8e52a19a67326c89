"""Narrow scrapes: asking an exporter for only the series llmtop reads (`?name[]=...`, answered by
prometheus_client's apps: vLLM's mount at /metrics/, not its plain /metrics). Never assumed: a
probe after a full scrape must hold exactly its kept series in clearly fewer bytes (`WORTH`),
and is redone `REPROBE_S` later. Buys 0.7-0.9 % of a core at 100 replicas, BENCHMARKS §15.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from urllib.parse import urlencode

from llmtop.core.base.raw import Sample

REPROBE_S = 600.0
"""Seconds before a target that did not narrow (or stopped) is probed again."""
WORTH = 0.9
"""A narrow answer is used only when at most this share of the full one's bytes: a full text's
length varies with its values, so a query ignored can come back a few bytes shorter."""


def worth(full_bytes: int, narrow_bytes: int) -> bool:
    """Whether a narrow answer is enough smaller than the full one to be the query answered."""
    return narrow_bytes <= WORTH * full_bytes


def query(sample_names: Iterable[str]) -> str:
    """The `name[]=...` query for these sample names, in a stable order."""
    return urlencode([("name[]", n) for n in sorted(set(sample_names))])


def candidates(metrics_url: str, names_query: str) -> tuple[str, ...]:
    """Narrow URLs to try for a /metrics URL, the plainest first: the same path with the query,
    then the path with a slash (vLLM's mount). None for a URL that has a query of its own."""
    if "?" in metrics_url or "#" in metrics_url:
        return ()
    plain = f"{metrics_url}?{names_query}"
    if metrics_url.endswith("/"):
        return (plain,)
    return (plain, f"{metrics_url}/?{names_query}")


def same_series(full: Sequence[Sample], narrow: Sequence[Sample]) -> bool:
    """Whether a narrow answer holds exactly the series of the full scrape's kept samples."""
    return len(full) == len(narrow) and {(s.name, s.labels) for s in full} == {
        (s.name, s.labels) for s in narrow
    }


class Narrowing:
    """One target's narrow URL (None: scraped in full) and when to probe it next.

    A target scraped narrow is checked again every `REPROBE_S` too (a full scrape and a probe):
    the server behind an address can change, and a narrow answer is only trusted while it holds
    what the full one does."""

    __slots__ = ("probe_at", "url")

    def __init__(self) -> None:
        self.url: str | None = None
        self.probe_at = 0.0  # probe with the first full scrape

    def use(self, now: float) -> str | None:
        """The URL to scrape narrow at `now`; None: scrape in full (and probe when `due`)."""
        return self.url if now < self.probe_at else None

    def due(self, now: float) -> bool:
        """Whether a full scrape at `now` should be followed by a probe."""
        return now >= self.probe_at

    def found(self, url: str | None, now: float) -> None:
        """A probe's outcome: the narrow URL to use, or None; either is checked again later."""
        self.url = url
        self.probe_at = now + REPROBE_S

    def failed(self, now: float) -> None:
        """The narrow URL answered in a way a full scrape is tried after (a status, an unreadable
        body): full from this poll on, until the next probe."""
        self.found(None, now)
