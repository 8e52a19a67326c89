"""Run the gateway in the foreground for `llmtop gateway`."""

from __future__ import annotations

import ipaddress
import logging
import sys
from typing import TYPE_CHECKING, Any

from llmtop.errors import UsageError
from llmtop.settings import GatewaySettings, resolve_token

if TYPE_CHECKING:
    from llmtop.gateway.server.upstream_feed import UpstreamFeed


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and localhost; a wildcard or any other address is not."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_exposure(host: str, token: str | None) -> None:
    """Refuse an admin API reachable from the network without a token."""
    if token is None and not is_loopback(host):
        raise UsageError(
            f"refusing to listen on {host} without an admin token: set LLMTOP_ADMIN_TOKEN "
            "or --admin-token-file, or listen on 127.0.0.1"
        )


def hash_key_from(text: str) -> str:
    """The key table's hash of a key typed or piped in (its line ending is not part of it)."""
    key = text.strip()
    if not key:
        raise UsageError(
            '--hash-key: no key on stdin (printf %s "$KEY" | llmtop gateway --hash-key)'
        )
    from llmtop.gateway.admission.callers import hash_key

    return hash_key(key)


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to the sys.stderr of the moment, so a replaced stderr (a test's capture) is
    never written to after it closed."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass


def log_to_stderr() -> None:
    """The gateway's own lines (the drain, replicas out and back, its counts as it stops) to
    stderr, one line each; uvicorn's loggers keep their own handlers. Once per process."""
    logger = logging.getLogger("llmtop.gateway")
    logger.setLevel(logging.INFO)
    if not any(isinstance(h, _Stderr) for h in logger.handlers):
        handler = _Stderr()
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)


def run_gateway(settings: GatewaySettings, feed: UpstreamFeed | None = None) -> None:
    """Build the app and serve until its drain is over (SIGTERM, Ctrl-C: docs/gateway.md);
    ServeError when the port is taken. `feed`: the upstreams follow it (upstream_feed.py)."""
    from llmtop.asgi.uvicorn_runner import parse_listen, serve_forever
    from llmtop.gateway.server.app import create_app

    host, port = parse_listen(settings.listen)
    settings = resolve_token(settings)  # read by settings.load already: no second read
    token = settings.admin_token
    check_exposure(host, token)
    from llmtop.gateway.server.history_loop import keeper_of

    app = create_app(settings, feed=feed, history=keeper_of(settings, token))
    log_to_stderr()
    auth = "token required" if token else "no token (loopback only)"
    serve_forever(
        app,
        host,
        port,
        drain=app.state.gateway.drain,
        banner=(
            f"llmtop gateway on {{url}} -> {feed.description if feed else settings.upstream}  "
            f"(max_concurrency {settings.max_concurrency}, max_queue {settings.max_queue}; "
            f"admin API: {auth})"
        ),
    )
