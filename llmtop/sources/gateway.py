"""The gateway's admin API seen from llmtop: `AdminClient`, and `GatewayReader` for the poll.

A failed change is one `AdminError`, a line for the status bar, never showing the token. A gateway
at the default URL that never answered (nor said 401) is "no gateway"; else failures are errors.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

import httpx

from llmtop.core.base.admin_api import LimitsDoc, StatsDoc, event_key, parse_events
from llmtop.errors import AdminError, GatewayReadError
from llmtop.settings import MonitorSettings
from llmtop.sources.http.clients import http_client
from llmtop.sources.vllm import describe_error

__all__ = ["SOURCE_HEADER", "AdminClient", "GatewayReadError", "GatewayReader"]

SOURCE_HEADER = "x-llmtop-source"


class AdminClient:
    """The one client of a gateway's admin API: reads and writes of the limits, stats, events,
    pause and resume. It owns its httpx client unless one is lent (`client`: the collector's)."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        timeout_s: float = 5.0,
        source: str = "tui",
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.headers = {SOURCE_HEADER: source}
        """Sent with every call: who is calling, and the bearer token when there is one."""
        if token:
            self.headers["authorization"] = f"Bearer {token}"
        self._owns_client = client is None
        self.http = client or http_client(timeout_s)

    @classmethod
    def from_settings(cls, monitor: MonitorSettings) -> AdminClient | None:
        """The client for the configured gateway, None when no gateway is configured."""
        if not monitor.gateway_url:
            return None
        return cls(monitor.gateway_url, monitor.admin_token)

    async def get_limits(self) -> LimitsDoc:
        """The gateway's current limits."""
        return cast(LimitsDoc, await self._call("GET", "/admin/limits"))

    async def set_limits(self, **changes: Any) -> dict[str, Any]:
        """Change any subset of the limits; returns the full new limits."""
        if not changes:
            raise AdminError("no limit to change")
        return await self._call("PATCH", "/admin/limits", json=changes)

    async def get_stats(self) -> StatsDoc:
        """The gateway's live state (in flight, queued, paused, ...): the truth for `p`."""
        return cast(StatsDoc, await self._call("GET", "/admin/stats"))

    async def apply_suggestion(self) -> str:
        """Set the limits the autopilot suggests (mode advise); what was set, in words."""
        body = await self._call("POST", "/admin/autopilot/apply")
        applied = body.get("applied") or {}
        return "applied the autopilot's suggestion: " + ", ".join(
            f"{k} {v}" for k, v in sorted(applied.items())
        )

    async def pause(self) -> bool:
        """Stop admitting new requests (they queue); returns the paused state."""
        return bool((await self._call("POST", "/admin/pause")).get("paused"))

    async def resume(self) -> bool:
        """Admit again; returns the paused state (False)."""
        return bool((await self._call("POST", "/admin/resume")).get("paused"))

    async def aclose(self) -> None:
        """Close the httpx client if it is this client's own."""
        if self._owns_client:
            await self.http.aclose()

    async def send(self, method: str, path: str, json: Any = None) -> httpx.Response:
        """The one HTTP path to the admin API (base URL, source, token); transport errors
        propagate."""
        return await self.http.request(
            method, self.base_url + path, json=json, headers=self.headers
        )

    async def _call(self, method: str, path: str, json: Any = None) -> dict[str, Any]:
        where = f"gateway {self.base_url}"
        try:
            resp = await self.send(method, path, json=json)
        except httpx.ConnectError:
            raise AdminError(f"{where} is not answering (connection refused)") from None
        except httpx.TimeoutException:
            raise AdminError(f"{where} did not answer in time") from None
        except httpx.HTTPError as e:
            raise AdminError(f"{where}: {type(e).__name__}") from None
        body: Any = None
        try:
            body = resp.json()
        except ValueError:
            body = None
        if resp.status_code >= 400:
            raise AdminError(_error_message(resp.status_code, body, where))
        if not isinstance(body, dict):
            raise AdminError(f"{where} {method} {path}: answer is not a JSON object")
        return body


def _error_message(status: int, body: Any, where: str) -> str:
    """One line from the gateway's {"error": {"message", "field"}} body, or the status."""
    message = None
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        err = body["error"]
        message = err.get("message")
        if isinstance(message, str) and err.get("field") and str(err["field"]) not in message:
            message = f"{err['field']}: {message}"
    if status == 401:
        return f"{where} refused the admin token (401{': ' + message if message else ''})"
    if status == 403:
        return f"{where} forbids admin changes (403{': ' + message if message else ''})"
    if status == 404:
        return f"{where} has no admin API (404): is it an llmtop gateway?"
    if isinstance(message, str) and message:
        return f"{where} rejected the change ({status}): {message.splitlines()[0]}"
    return f"{where} answered {status}"


class GatewayReader:
    """Polls one gateway's /admin/stats and the limit-change events since the last poll."""

    def __init__(self, url: str, token: str | None, *, optional: bool) -> None:
        self.url = url.rstrip("/")
        self.optional = optional
        """True for the default URL: absent until it first answers."""
        self._token = token
        self._admin: AdminClient | None = None
        """The admin client on the collector's httpx client (made at the first read)."""
        self._seen_events: set[tuple[Any, ...]] | None = None
        self.answered = False

    async def read(
        self, client: httpx.AsyncClient, timeout_s: float
    ) -> tuple[dict[str, Any] | None, str | None, tuple[dict[str, Any], ...], bool]:
        """(stats, error, new events, present). Never raises for a gateway problem."""
        try:
            stats = await asyncio.wait_for(self._get(client, "/admin/stats"), timeout_s)
            if not isinstance(stats, dict):
                raise GatewayReadError(
                    f"{self.url}/admin/stats is not a JSON object", target=self.url
                )
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
        if self._admin is None or self._admin.http is not client:
            self._admin = AdminClient(self.url, self._token, source="poll", client=client)
        resp = await self._admin.send("GET", path)
        if resp.status_code == 401:
            raise GatewayReadError(
                f"{self.url}: admin token rejected (401): set LLMTOP_ADMIN_TOKEN or "
                "--admin-token-file",
                target=self.url,
                is_gateway=True,
            )
        if resp.status_code != 200:
            raise GatewayReadError(
                f"HTTP {resp.status_code} from {self.url}{path}", target=self.url
            )
        try:
            return resp.json()
        except ValueError:
            raise GatewayReadError(
                f"{self.url}{path} did not answer JSON: is this the llmtop gateway?",
                target=self.url,
            ) from None

    async def _events(
        self, client: httpx.AsyncClient, timeout_s: float
    ) -> tuple[dict[str, Any], ...]:
        """Events not seen at the previous poll (none on the first: those are history)."""
        try:
            data = await asyncio.wait_for(self._get(client, "/admin/events"), timeout_s)
        except Exception:
            return ()
        events = parse_events(data)
        if not events and not (isinstance(data, dict) and isinstance(data.get("events"), list)):
            return ()
        keys = [event_key(e) for e in events]
        seen, self._seen_events = self._seen_events, set(keys)
        if seen is None:
            return ()
        return tuple(dict(e) for e, k in zip(events, keys, strict=True) if k not in seen)
