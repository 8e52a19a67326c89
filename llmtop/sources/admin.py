"""The write side of the gateway's admin API: read and change limits, pause and resume.

Every failure (refused, timed out, 401, 400, 5xx, a body that is not the contract) becomes one
`AdminError` with a one-line message for the status line; the token is sent as a bearer header
and never appears in a message.
"""

from __future__ import annotations

from typing import Any

import httpx

from llmtop.errors import AdminError
from llmtop.settings import MonitorSettings, read_token

SOURCE_HEADER = "x-llmtop-source"


class AdminClient:
    """httpx client for /admin/limits, /admin/pause and /admin/resume of one gateway."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        timeout_s: float = 5.0,
        source: str = "tui",
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        headers = {SOURCE_HEADER: source}
        if token:
            headers["authorization"] = f"Bearer {token}"
        self._client = httpx.AsyncClient(
            base_url=self.base_url,
            headers=headers,
            timeout=httpx.Timeout(timeout_s),
            transport=transport,
        )

    @classmethod
    def from_settings(cls, monitor: MonitorSettings) -> AdminClient | None:
        """The client for the configured gateway, None when no gateway is configured."""
        if not monitor.gateway_url:
            return None
        token = read_token(monitor.admin_token, monitor.admin_token_file)
        return cls(monitor.gateway_url, token)

    async def get_limits(self) -> dict[str, Any]:
        """The gateway's current limits."""
        return await self._call("GET", "/admin/limits")

    async def set_limits(self, **changes: Any) -> dict[str, Any]:
        """Change any subset of the limits; returns the full new limits."""
        if not changes:
            raise AdminError("no limit to change")
        return await self._call("PATCH", "/admin/limits", json=changes)

    async def get_stats(self) -> dict[str, Any]:
        """The gateway's live state (in flight, queued, paused, ...): the truth for `p`."""
        return await self._call("GET", "/admin/stats")

    async def pause(self) -> bool:
        """Stop admitting new requests (they queue); returns the paused state."""
        return bool((await self._call("POST", "/admin/pause")).get("paused"))

    async def resume(self) -> bool:
        """Admit again; returns the paused state (False)."""
        return bool((await self._call("POST", "/admin/resume")).get("paused"))

    async def aclose(self) -> None:
        await self._client.aclose()

    async def _call(self, method: str, path: str, json: Any = None) -> dict[str, Any]:
        where = f"gateway {self.base_url}"
        try:
            resp = await self._client.request(method, path, json=json)
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
