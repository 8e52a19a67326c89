"""Shared pieces of the fault suite: a raw upstream that misbehaves on cue, a probe into the
gateway's own event loop (tasks, the upstream pool, its stats), and socket accounting read from
/proc, so every fault test ends with the same leak check.

Counting is per process: the tests, the gateway (a ServerThread) and in-process upstreams share
one process, so sockets are told apart by port (/proc/net/tcp), not by owner.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import struct
import threading
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from llmtop.asgi.uvicorn_runner import ServerThread

T = TypeVar("T")

FIGURES: Counter[str] = Counter()
"""faults (survived), inputs (fuzz inputs tried), requests (sent), lost (requests without a
defined answer): printed at the end of the run by conftest.py and quoted in docs/reliability.md."""

_TCP_STATES = {"01": "ESTABLISHED", "08": "CLOSE_WAIT", "0A": "LISTEN", "06": "TIME_WAIT"}


# ---- sockets ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sock:
    """One TCP socket this process holds open."""

    local_port: int
    remote_port: int
    state: str


def _proc_tcp() -> dict[str, Sock]:
    """inode -> socket, for every TCP socket on the host (IPv4 and IPv6)."""
    out: dict[str, Sock] = {}
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name) as f:
                lines = f.readlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            local, remote, state, inode = parts[1], parts[2], parts[3], parts[9]
            out[inode] = Sock(
                int(local.rsplit(":", 1)[1], 16),
                int(remote.rsplit(":", 1)[1], 16),
                _TCP_STATES.get(state, state),
            )
    return out


def socket_inodes() -> list[str]:
    """Inodes of every socket file descriptor of this process."""
    inodes = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith("socket:["):
                inodes.append(target[8:-1])
    return inodes


def open_sockets() -> tuple[int, list[Sock]]:
    """(socket fds of this process, the TCP ones among them with their ports and state)."""
    inodes = socket_inodes()
    table = _proc_tcp()
    return len(inodes), [table[i] for i in inodes if i in table]


# ---- the gateway's loop ------------------------------------------------------------------------


class LoopProbe:
    """Wraps the gateway's ASGI app to learn its event loop (it runs on a ServerThread), so a
    test can count the tasks there and read its state without going through a socket."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.state = app.state.gateway
        self.loop: asyncio.AbstractEventLoop | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.loop = asyncio.get_running_loop()
        await self.app(scope, receive, send)

    def call(self, fn: Callable[[], T]) -> T:
        """Run `fn` on the gateway's loop (its state is not thread-safe) and return its result."""

        async def run() -> T:
            return fn()

        return self.run(run())

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        assert self.loop is not None, "the gateway has not started"
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(5)

    def tasks(self) -> int:
        """Tasks alive on the gateway's loop, not counting the one asking."""
        return self.call(lambda: len(asyncio.all_tasks()) - 1)

    def stats(self) -> dict[str, Any]:
        return self.call(self.state.stats)

    def _idle(self) -> list[Any]:
        """The idle connections in aiohttp's keep-alive pool (its private `_conns`: the only
        way to tell a pooled connection from a leaked one)."""
        session = self.state.session
        conns = getattr(getattr(session, "connector", None), "_conns", {})
        return [protocol for idle in conns.values() for protocol, _ in idle]

    def pooled(self) -> int:
        """Idle connections in the gateway's upstream keep-alive pool. A connection still busy
        once every request has ended is a leak, so it does not count here."""
        return self.call(lambda: len(self._idle()))

    def pool_states(self) -> list[str]:
        """repr of each idle pooled connection, for failure messages."""
        return self.call(lambda: [repr(p) for p in self._idle()])


@dataclass
class Baseline:
    tasks: int
    sockets: int


def baseline(probe: LoopProbe, upstream_ports: tuple[int, ...] = ()) -> Baseline:
    """Tasks and sockets before a fault, with the gateway and the upstream idle (sockets
    accepted by in-process upstreams not counted)."""
    total, tcp = open_sockets()
    theirs = [t for t in tcp if t.local_port in upstream_ports and t.state != "LISTEN"]
    return Baseline(probe.tasks(), total - len(theirs))


async def wait_for(check: Callable[[], T], timeout_s: float = 10.0, what: str = "") -> T:
    """Poll `check` (off the loop: it may block on another thread) until it returns truthy."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        value = await asyncio.to_thread(check)
        if value:
            return value
        assert loop.time() < deadline, f"not reached in {timeout_s} s: {what}"
        await asyncio.sleep(0.02)


def accounted(s: dict[str, Any]) -> None:
    """Every request the gateway took ended in exactly one outcome."""
    assert s["offered"] == sum(s["outcomes"].values()) + s["in_flight"] + s["queued"], s
    assert s["outcomes"]["rejected"] == sum(s["rejections"].values()), s


async def assert_recovered(
    probe: LoopProbe, base: Baseline, gateway_port: int, upstream_ports: tuple[int, ...] = ()
) -> dict[str, Any]:
    """The leak check after a fault, clients closed: nothing in flight or queued, every request
    accounted for, no task left on the gateway's loop, no accepted socket still open, and no
    socket beyond the baseline but the upstream keep-alive pool. Sockets accepted by in-process
    upstreams (`upstream_ports`) are theirs, not the gateway's, and are not counted.
    Returns the final stats."""
    s = await wait_for(
        lambda: (st := probe.stats())["in_flight"] == 0 and st["queued"] == 0 and st,
        what="in_flight = queued = 0",
    )
    accounted(s)
    assert s["offered"] == sum(s["outcomes"].values())
    await wait_for(lambda: probe.tasks() <= base.tasks, what=f"tasks back to {base.tasks}")

    def sockets_back() -> bool:
        total, tcp = open_sockets()
        theirs = [t for t in tcp if t.local_port in upstream_ports and t.state != "LISTEN"]
        ours = [t for t in tcp if t.local_port not in upstream_ports]
        accepted = [t for t in ours if t.local_port == gateway_port and t.state != "LISTEN"]
        half_closed = [t for t in ours if t.state == "CLOSE_WAIT"]
        return (
            not accepted
            and not half_closed
            and total - len(theirs) <= base.sockets + probe.pooled()
        )

    await wait_for(sockets_back, what="sockets back to the baseline plus the upstream pool")
    FIGURES["faults"] += 1
    return s


# ---- a misbehaving upstream ----------------------------------------------------------------------

Fault = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
)


def sse_chunk(i: int) -> bytes:
    data = b'data: {"i": %d}\n\n' % i
    return b"%x\r\n%s\r\n" % (len(data), data)


def reset(writer: asyncio.StreamWriter) -> None:
    """Close with a TCP RST (SO_LINGER 0): what a killed process's peer sees."""
    sock = writer.get_extra_info("socket")
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class FaultUpstream:
    """A raw HTTP/1.1 server on 127.0.0.1, on its own thread and loop: /health answers 200
    (unless `answer_health` is off), every other request gets `fault(reader, writer)` and then
    the connection is closed."""

    def __init__(self, fault: Fault, *, answer_health: bool = True) -> None:
        self.fault = fault
        self.answer_health = answer_health
        self.requests = 0
        self.open = 0
        """Connections open now (a kept-alive /health connection among them)."""
        self.faulting = 0
        """Requests the fault is answering now: what a client's leaving must abort (the
        gateway's /health checks keep a connection of their own open, not a request)."""
        self.seen: list[tuple[bytes, bytes]] = []
        """(head, body) of every request the fault answered."""
        self._handlers: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._handle, "127.0.0.1", 0, limit=2**24), self.loop
        ).result(5)
        self.port: int = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        self._writers.add(writer)
        self.open += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value.strip())
                body = await reader.readexactly(length)
                if self.answer_health and head.startswith(b"GET /health "):
                    writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                    await writer.drain()
                    continue
                self.requests += 1
                self.seen.append((head, body))
                self.faulting += 1
                try:
                    await self._fault_until_peer_leaves(reader, writer)
                finally:
                    self.faulting -= 1
                break
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        except asyncio.CancelledError:
            pass  # closed by the test: end quietly
        finally:
            self.open -= 1
            self._handlers.discard(task)
            writer.close()

    async def _fault_until_peer_leaves(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """Run the fault; stop it when the peer closes, as a real engine aborts the request."""
        fault = asyncio.ensure_future(self.fault(reader, writer))
        gone = asyncio.ensure_future(reader.read())
        try:
            await asyncio.wait((fault, gone), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in (fault, gone):
                t.cancel()
            await asyncio.gather(fault, gone, return_exceptions=True)

    def close(self) -> None:
        async def stop() -> None:
            self._server.close()
            # A connection accepted just before the close may not have started its handler yet:
            # end every task on this loop, not only the registered handlers, so none is left
            # pending when the loop closes (its coroutine would be destroyed mid-await).
            me = asyncio.current_task()
            for _ in range(3):
                await asyncio.sleep(0)
                rest = [t for t in asyncio.all_tasks() if t is not me]
                if not rest:
                    break
                for t in rest:
                    t.cancel()
                await asyncio.gather(*rest, return_exceptions=True)
            # a closed transport with unsent bytes waits for a peer that may be gone: abort what
            # is left, and let connection_lost run before the loop stops (else the socket is
            # garbage-collected open, a ResourceWarning in whichever test runs then)
            for w in self._writers:
                w.transport.abort()
            await asyncio.sleep(0)
            await asyncio.sleep(0)

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(stop(), self.loop).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        self.loop.close()


@dataclass
class Gateway:
    """A gateway on a ServerThread and the probe into its loop."""

    server: ServerThread
    probe: LoopProbe

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def port(self) -> int:
        return self.server.port
