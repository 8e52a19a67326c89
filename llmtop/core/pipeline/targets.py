"""The targets file of a fleet: one engine URL per line, an optional name after it (else
host:port); `#` comments and blank lines are skipped, and a bad line is an error naming it.
Pure: `sources/targets_file.py` re-reads the file when it changes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from llmtop.errors import ConfigError


@dataclass(frozen=True)
class Target:
    """One engine to watch: its base URL and the name the fleet table shows."""

    url: str
    name: str


def default_name(url: str) -> str:
    """host:port of a URL (the path too, when there is one): short, and unique in most fleets;
    a pod read through the API server's pod proxy is its pod's name (a recording replayed)."""
    parts = urlsplit(url)
    path = parts.path.rstrip("/").removesuffix("/metrics")
    pod = _POD_PROXY.fullmatch(path)
    if pod is not None:
        return pod["name"]
    return (parts.netloc or url) + path


_POD_PROXY = re.compile(r"/api/v1/namespaces/[^/]+/pods/(?P<name>[^/:]+)(?::\d+)?/proxy")


def parse_targets(text: str, source: str = "targets file") -> tuple[Target, ...]:
    """Targets from a file's text; ConfigError names the first bad line (`source` line N)."""
    out: list[Target] = []
    urls: set[str] = set()
    names: set[str] = set()
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split()
        if len(fields) > 2:
            raise ConfigError(f"{source} line {lineno}: expected 'URL [NAME]', got {line!r}")
        url = fields[0].rstrip("/")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"{source} line {lineno}: {fields[0]!r} is not an http(s) URL")
        name = fields[1] if len(fields) == 2 else default_name(url)
        if url in urls:
            raise ConfigError(f"{source} line {lineno}: {url} is listed twice")
        if name in names:
            raise ConfigError(f"{source} line {lineno}: the name {name!r} is used twice")
        urls.add(url)
        names.add(name)
        out.append(Target(url, name))
    return tuple(out)


def targets_from_urls(urls: Iterable[str]) -> tuple[Target, ...]:
    """Targets for `--vllm` URLs, named host:port; a repeated URL is watched once."""
    seen: dict[str, Target] = {}
    for u in urls:
        url = u.rstrip("/")
        seen.setdefault(url, Target(url, default_name(url)))
    return tuple(seen.values())
