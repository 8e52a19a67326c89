"""Run an ASGI app with uvicorn: in the foreground for a CLI command, or on a thread for the demo
and the tests. The socket is bound here, so "port in use" is a ServeError with the address, and
port 0 gives a free port whose number is known before the first request.
"""

from __future__ import annotations

import asyncio
import errno
import socket
import threading
from typing import Any

import uvicorn

from llmtop.errors import ServeError


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket, or a ServeError that names the address and the reason."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            raise ServeError(
                f"{host}:{port} is already in use (pick another with --port)"
            ) from None
        raise ServeError(f"cannot listen on {host}:{port}: {e.strerror}") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def parse_listen(listen: str) -> tuple[str, int]:
    """'127.0.0.1:9000' or '[::1]:9000' -> (host, port), or a ServeError naming the value."""
    host, sep, port_s = listen.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port_s.isdigit() or not 0 <= int(port_s) <= 65535:
        raise ServeError(f"bad listen address {listen!r}: expected HOST:PORT")
    return host, int(port_s)


def _config(app: Any, log_level: str) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        log_level=log_level,
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=3,
        timeout_keep_alive=30,
    )


def url_of(sock: socket.socket) -> str:
    """http://host:port of a bound socket."""
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def serve_forever(
    app: Any, host: str, port: int, *, log_level: str = "warning", banner: str | None = None
) -> None:
    """Serve until Ctrl-C; print the banner (with {url}) once listening."""
    sock = bind(host, port)
    server = uvicorn.Server(_config(app, log_level))
    if banner:
        print(banner.format(url=url_of(sock)), flush=True)
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()


class ServerThread:
    """An ASGI app served by uvicorn on its own thread and event loop."""

    def __init__(
        self, app: Any, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning"
    ) -> None:
        self._sock = bind(host, port)
        self.url = url_of(self._sock)
        self.port: int = self._sock.getsockname()[1]
        self._server = uvicorn.Server(_config(app, log_level))
        self._thread = threading.Thread(target=self._run, name=f"asgi:{self.port}", daemon=True)
        self._error: BaseException | None = None

    def _run(self) -> None:
        try:
            asyncio.run(self._server.serve(sockets=[self._sock]))
        except BaseException as e:  # surfaced by start()
            self._error = e

    def start(self, timeout_s: float = 15.0) -> ServerThread:
        """Start and wait until the server accepts connections (lifespan finished)."""
        self._thread.start()
        deadline = threading.Event()
        waited = 0.0
        while not self._server.started and self._thread.is_alive() and waited < timeout_s:
            deadline.wait(0.01)
            waited += 0.01
        if not self._server.started:
            self.stop()
            raise ServeError(f"server on {self.url} did not start: {self._error or 'timeout'}")
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        """Ask uvicorn to shut down and wait for the thread; safe to call twice."""
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        if self._thread.is_alive():
            self._server.force_exit = True
            self._thread.join(timeout_s)
        self._sock.close()

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
