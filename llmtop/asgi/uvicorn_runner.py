"""Run an ASGI app with uvicorn, in the foreground (a CLI command) or on a thread (the demo, tests).
The socket is bound here, so "port in use" is a ServeError with the address, and port 0's number
is known before the first request. In the foreground a `Drain` may own the signals, so SIGTERM
starts its grace instead of closing the listener (docs/gateway.md, "Shutdown")."""

from __future__ import annotations

import asyncio
import errno
import signal
import socket
import threading
from types import FrameType
from typing import Any

import uvicorn

from llmtop.asgi.drain import Drain
from llmtop.errors import ServeError

CUT_MARGIN_S = 5.0
"""uvicorn's shutdown timeout is the drain's plus this: time for the app's own cut to end
each stream with its error event and close, before uvicorn cancels what is left."""


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


def _config(app: Any, log_level: str, drain: Drain | None = None) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        log_level=log_level,
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=3 if drain is None else int(drain.timeout_s + CUT_MARGIN_S),
        timeout_keep_alive=30,
    )


class DrainingServer(uvicorn.Server):
    """uvicorn with a drain: the first signal begins it (the grace after a SIGTERM), the
    listener closes when the grace is over, a second signal cuts at once, a third is
    uvicorn's own force quit."""

    def __init__(self, config: uvicorn.Config, drain: Drain) -> None:
        super().__init__(config)
        self.drain = drain
        self.signals = 0

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.signals += 1
        if self.signals == 1:
            self._captured_signals.append(sig)  # raised again once served (uvicorn's rule)
            self.drain.begin(signal.Signals(sig).name, grace=sig == signal.SIGTERM)
        elif self.signals == 2:
            self.drain.force()
            self.should_exit = True
        else:
            self.force_exit = True

    async def on_tick(self, counter: int) -> bool:
        if not self.drain.ready and not self.drain.accepting():
            self.should_exit = True
        return await super().on_tick(counter)


def url_of(sock: socket.socket) -> str:
    """http://host:port of a bound socket."""
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def serve_forever(
    app: Any,
    host: str,
    port: int,
    *,
    log_level: str = "warning",
    banner: str | None = None,
    drain: Drain | None = None,
) -> None:
    """Serve until Ctrl-C or SIGTERM (with `drain`: until its drain is over); print the banner
    (with {url}) once listening."""
    sock = bind(host, port)
    config = _config(app, log_level, drain)
    server = uvicorn.Server(config) if drain is None else DrainingServer(config, drain)
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
