"""A gateway's recent past, read over its admin API: `GET /admin/history?since=S` answers in the
recording format (docs/recording.md, "History in the gateway"), so what comes back is a
`Recording` that replay, report and the console read as they read a file.

Every failure is one `LlmtopError` line, never a traceback: an unreachable gateway, a refused
token (401/403) or a gateway without history (404) is a `GatewayReadError`; an answer that is not
a recording is a `RecordingError`.
"""

from __future__ import annotations

import httpx

from llmtop.core.record.decode import Recording, read_recording_bytes
from llmtop.errors import GatewayReadError
from llmtop.sources.gateway import SOURCE_HEADER
from llmtop.sources.http.clients import http_client

HISTORY_PATH = "/admin/history"
TIMEOUT_S = 30.0
"""A day of history is ~35 MB of gzip (BENCHMARKS.md); loopback or a LAN sends it in seconds."""


def _why(status: int, where: str) -> str:
    if status == 401:
        return (
            f"{where} refused the admin token (401): set LLMTOP_ADMIN_TOKEN or --admin-token-file"
        )
    if status == 403:
        return f"{where} forbids reading its history (403)"
    if status == 404:
        return f"{where} has no history (404): an llmtop gateway older than history, or not one"
    if status == 503:
        return f"{where} keeps no history now (503: started with --no-history, or its store failed)"
    return f"{where} answered {status} to {HISTORY_PATH}"


def history_params(since_s: float, until: float | None) -> dict[str, str]:
    """The query of `gateway_history`: `since` in seconds ago, `until` a unix time."""
    params = {"since": f"{max(0.0, since_s):.3f}"}
    if until is not None:
        params["until"] = f"{until:.3f}"
    return params


async def gateway_history(
    url: str,
    token: str | None,
    since_s: float,
    until: float | None = None,
    *,
    client: httpx.AsyncClient | None = None,
) -> Recording:
    """The gateway's polls of the last `since_s` seconds (up to the unix time `until`, else
    now), as a `Recording`; `client` for tests (an ASGI or mock transport)."""
    base = url.rstrip("/")
    where = f"gateway {base}"
    headers = {SOURCE_HEADER: "history", "accept-encoding": "gzip"}
    if token:
        headers["authorization"] = f"Bearer {token}"
    http = client or http_client(TIMEOUT_S)
    try:
        resp = await http.get(
            base + HISTORY_PATH, params=history_params(since_s, until), headers=headers
        )
    except httpx.ConnectError:
        raise GatewayReadError(
            f"{where} is not answering (connection refused)", target=base
        ) from None
    except httpx.TimeoutException:
        raise GatewayReadError(
            f"{where} did not send its history within {TIMEOUT_S:g} s", target=base
        ) from None
    except httpx.HTTPError as e:
        raise GatewayReadError(f"{where}: {type(e).__name__}", target=base) from None
    finally:
        if client is None:
            await http.aclose()
    if resp.status_code != 200:
        status = resp.status_code
        raise GatewayReadError(
            _why(status, where), target=base, is_gateway=status in (401, 403, 503)
        )
    # httpx has undone a Content-Encoding: gzip already; a body still gzipped is read as such
    return read_recording_bytes(resp.content, name=f"{base}{HISTORY_PATH}")


__all__ = ["gateway_history", "history_params"]
