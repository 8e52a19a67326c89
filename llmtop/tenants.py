"""Who calls the gateway, as the config names them: the key table (an API key's SHA-256 -> its
tenant and the highest priority it may claim) and the per-tenant TTFT budgets, each parsed from
the config file's table or the environment's one-line form. Apart from settings.py, which reads
every section the same way: these two fields bring parsers of their own (`metadata["parse"]`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from llmtop.errors import ConfigError

GATEWAY_PRIORITIES: tuple[str, ...] = ("high", "normal", "low")
"""The gateway's priorities, highest first (the admission controller's own list)."""


@dataclass(frozen=True)
class ApiKey:
    """One row of the gateway's key table: a key's SHA-256 (never the key), its tenant and the
    highest priority its requests may claim."""

    sha256: str
    tenant: str
    max_priority: str = "normal"


def _api_key(row: Any, where: str) -> ApiKey:
    if isinstance(row, str):  # the env form: <sha256>=<tenant>[:<max_priority>]
        digest, _, rest = row.partition("=")
        tenant, _, prio = rest.partition(":")
        row = {"sha256": digest, "tenant": tenant, **({"max_priority": prio} if prio else {})}
    if not isinstance(row, Mapping):
        raise ConfigError(f"{where}: expected a table with sha256, tenant, max_priority")
    unknown = sorted(set(row) - {"sha256", "tenant", "max_priority"})
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r}")
    digest = str(row.get("sha256", "")).strip().lower()
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise ConfigError(
            f"{where}: sha256 must be 64 hex digits (`llmtop gateway --hash-key` prints it)"
        )
    tenant = str(row.get("tenant", "")).strip()
    if not tenant or len(tenant) > 64 or not tenant.isprintable():
        raise ConfigError(f"{where}: tenant must be 1-64 printable characters")
    prio = str(row.get("max_priority", "normal")).strip().lower()
    if prio not in GATEWAY_PRIORITIES:
        raise ConfigError(
            f"{where}: max_priority must be one of {', '.join(GATEWAY_PRIORITIES)}, got {prio!r}"
        )
    return ApiKey(digest, tenant, prio)


def parse_tenant_slos(value: Any, where: str) -> tuple[tuple[str, float], ...]:
    """Per-tenant TTFT budgets: a table `{tenant = seconds}` in the config file, or
    `tenant=seconds,...` in the environment; each a number of seconds > 0."""
    if isinstance(value, str):
        pairs = [p.split("=", 1) for p in value.split(",") if p.strip()]
        if any(len(p) != 2 for p in pairs):
            raise ConfigError(f"{where}: expected tenant=seconds,..., got {value!r}")
        items: list[tuple[Any, Any]] = [(k.strip(), v.strip()) for k, v in pairs]
    elif isinstance(value, Mapping):
        items = list(value.items())
    else:
        raise ConfigError(f"{where}: expected a table of tenant = seconds, got {value!r}")
    out = []
    for k, v in items:
        try:
            seconds = float(v)
        except (TypeError, ValueError):
            seconds = float("nan")
        if not str(k) or isinstance(v, bool) or not seconds > 0 or seconds == float("inf"):
            raise ConfigError(f"{where}: {k}: expected a number of seconds > 0, got {v!r}")
        out.append((str(k), seconds))
    return tuple(out)


def parse_api_keys(value: Any, where: str) -> tuple[ApiKey, ...]:
    """The key table from the config file (an array of tables) or the env (comma-separated
    `<sha256>=<tenant>[:<max_priority>]`); a key listed twice is an error."""
    rows = [r for r in value.split(",") if r.strip()] if isinstance(value, str) else value
    if not isinstance(rows, list | tuple):
        raise ConfigError(f"{where}: expected a list of keys")
    keys = tuple(_api_key(r, f"{where}[{i}]") for i, r in enumerate(rows))
    seen: set[str] = set()
    for i, k in enumerate(keys):
        if k.sha256 in seen:
            raise ConfigError(f"{where}[{i}]: sha256 listed twice")
        seen.add(k.sha256)
    return keys
