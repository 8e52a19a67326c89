"""Read side of the llmtop gateway's admin API: /admin/stats (limits included) and /admin/events.

The write side (changing limits) is `sources.admin`. A gateway at the default URL that has never
answered (refused, timed out, or something else on that port) is "no gateway", not an alarm,
unless its admin API answered 401 (a gateway is there: the token is wrong). Once it has
answered, or when the user named a URL, every failure is an error the TUI shows.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from llmtop.sources.vllm import describe_error


class GatewayReadError(Exception):
    """The gateway answered, but not as its admin API should."""

    def __init__(self, message: str, *, is_gateway: bool = False) -> None:
        super().__init__(message)
        self.is_gateway = is_gateway
        """True when the answer proves an llmtop gateway is there (a 401 from its admin API)."""


class GatewayReader:
    """Polls one gateway's /admin/stats and the limit-change events since the last poll."""

    def __init__(self, url: str, token: str | None, *, optional: bool) -> None:
        self.url = url.rstrip("/")
        self.optional = optional
        """True for the default URL: absent until it first answers."""
        self._headers = {"authorization": f"Bearer {token}"} if token else {}
        self._seen_events: set[tuple[Any, ...]] | None = None
        self.answered = False

    async def read(
        self, client: httpx.AsyncClient, timeout_s: float
    ) -> tuple[dict[str, Any] | None, str | None, tuple[dict[str, Any], ...], bool]:
        """(stats, error, new events, present). Never raises for a gateway problem."""
        try:
            stats = await asyncio.wait_for(self._get(client, "/admin/stats"), timeout_s)
            if not isinstance(stats, dict):
                raise GatewayReadError(f"{self.url}/admin/stats is not a JSON object")
            if "limits" not in stats:
                limits = await asyncio.wait_for(self._get(client, "/admin/limits"), timeout_s)
                if isinstance(limits, dict):
                    stats = {**stats, "limits": limits}
        except GatewayReadError as e:
            if self.optional and not self.answered and not e.is_gateway:
                return None, None, (), False  # something else on the default port
            return None, str(e), (), True
        except Exception as e:
            if self.optional and not self.answered:
                return None, None, (), False  # no gateway at the default URL: not an alarm
            return None, describe_error(self.url, e, timeout_s), (), True
        self.answered = True
        events = await self._events(client, timeout_s)
        return stats, None, events, True

    async def _get(self, client: httpx.AsyncClient, path: str) -> Any:
        resp = await client.get(self.url + path, headers=self._headers)
        if resp.status_code == 401:
            raise GatewayReadError(
                f"{self.url}: admin token rejected (401): set LLMTOP_ADMIN_TOKEN or "
                "--admin-token-file",
                is_gateway=True,
            )
        if resp.status_code != 200:
            raise GatewayReadError(f"HTTP {resp.status_code} from {self.url}{path}")
        try:
            return resp.json()
        except ValueError:
            raise GatewayReadError(
                f"{self.url}{path} did not answer JSON: is this the llmtop gateway?"
            ) from None

    async def _events(
        self, client: httpx.AsyncClient, timeout_s: float
    ) -> tuple[dict[str, Any], ...]:
        """Events not seen at the previous poll (none on the first: those are history)."""
        try:
            data = await asyncio.wait_for(self._get(client, "/admin/events"), timeout_s)
        except Exception:
            return ()
        raw = data.get("events") if isinstance(data, dict) else None
        if not isinstance(raw, list):
            return ()
        events = [e for e in raw if isinstance(e, dict)]
        keys = [_key(e) for e in events]
        seen, self._seen_events = self._seen_events, set(keys)
        if seen is None:
            return ()
        return tuple(e for e, k in zip(events, keys, strict=True) if k not in seen)


def _key(event: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(repr(event.get(k)) for k in ("time", "field", "old", "new", "source"))
