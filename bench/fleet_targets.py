"""Many fake vLLM /metrics endpoints in one process, for bench/bench_fleet.py.

Each of N ports serves the real vLLM 0.32 capture (tests/fixtures/metrics-load.txt, 53 KB) with
its counters and histograms advancing with time at a rate of its own, over keep-alive HTTP/1.1.
A separate process, so that the benchmark's llmtop process measures only its own CPU.

As on a real vLLM, /metrics ignores a query and /metrics/ answers `?name[]=...` with only the
samples named (vLLM's prometheus_client mount; llmtop's narrow scrapes ask it,
core/exposition/narrow.py);
with --no-name-filter /metrics/ is not found, as on an exporter without that mount, and every
scrape is a full one.

Every replica has a speed of its own, so no two serve the same text (real replicas never do,
and a scraper that memoises lines must not gain from replicas sharing one); every counter line
changes every second (a busy engine's worst case: in the recorded runs of tests/fixtures only
26-36 % of the kept lines change between polls). With --gzip a replica compresses its answer
when the request accepts gzip, as prometheus_client's make_asgi_app does (vLLM 0.32's /metrics
does not: prometheus-fastapi-instrumentator serves it, uncompressed).

    python bench/fleet_targets.py --replicas 100 --ports-file ports.txt [--gzip] [--no-name-filter]
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import re
import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from llmtop.sim.exposition import restrict

FIXTURE = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "metrics-load.txt"
_SAMPLE = re.compile(r"^(\S+?(?:\{.*\})?) (\S+)$")
_GROWS = ("_total", "_bucket", "_count", "_sum")


class Payload:
    """The capture as (line prefix, value, grows) triples; render(t, speed) advances counters."""

    def __init__(self, text: str, cache: int = 64) -> None:
        self.parts: list[tuple[str, float, bool]] = []
        self._cache: dict[tuple[int, float, bool], bytes] = {}
        self._cache_max = cache
        for line in text.splitlines():
            m = _SAMPLE.match(line)
            if m is None or line.startswith("#"):
                self.parts.append((line, 0.0, False))
                continue
            name = m.group(1).split("{", 1)[0]
            grows = name.endswith(_GROWS) and "_created" not in name
            self.parts.append((m.group(1) + " ", float(m.group(2)), grows))

    def render(self, elapsed_s: float, speed: float, compressed: bool = False) -> bytes:
        """The text at a whole second (cached: a scrape repeated within the second gets it
        again, gzipped once if asked), so that this process stays light next to the llmtop
        process being measured."""
        key = (int(elapsed_s), speed, compressed)
        if key not in self._cache:
            if len(self._cache) > self._cache_max:
                self._cache.clear()
            text = self._render(float(key[0]), speed)
            self._cache[key] = gzip.compress(text) if compressed else text
        return self._cache[key]

    def _render(self, elapsed_s: float, speed: float) -> bytes:
        out = []
        for prefix, value, grows in self.parts:
            if not prefix.endswith(" "):
                out.append(prefix)
            elif grows:
                out.append(f"{prefix}{value * (1.0 + speed * elapsed_s / 60.0):.1f}")
            else:
                out.append(f"{prefix}{value}")
        return ("\n".join(out) + "\n").encode()


def speed_of(replica: int) -> float:
    """Counters grow by `speed` times their captured value a minute; no two replicas alike."""
    return 1.0 + 0.37 * replica


def accepts_gzip(head: bytes) -> bool:
    """Whether the request's Accept-Encoding names gzip (prometheus_client's test)."""
    for line in head.lower().split(b"\r\n"):
        if line.startswith(b"accept-encoding:"):
            return b"gzip" in line
    return False


async def serve(
    replicas: int, ports_file: Path, compress: bool = False, name_filter: bool = True
) -> None:
    text = FIXTURE.read_text()
    payload = Payload(text, cache=4 * replicas)
    narrowed: dict[str, Payload] = {}  # query -> the capture restricted to its names
    start = time.monotonic()

    def payload_of(path: bytes) -> Payload | None:
        """The payload a GET of `path` answers with; None: not found."""
        parts = urlsplit(path.decode("latin-1"))
        if parts.path.endswith("/metrics"):
            return payload  # vLLM's plain /metrics route: the query ignored
        if not (name_filter and parts.path.endswith("/metrics/")):
            return None
        names = parse_qs(parts.query).get("name[]")
        if not names:
            return payload
        if parts.query not in narrowed:
            narrowed[parts.query] = Payload(restrict(text, set(names)), cache=4 * replicas)
        return narrowed[parts.query]

    def handler(speed: float):  # type: ignore[no-untyped-def]
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                while True:
                    head = await reader.readuntil(b"\r\n\r\n")
                    path = head.split(b" ", 2)[1]
                    zipped = compress and accepts_gzip(head)
                    answer = payload_of(path)
                    if answer is not None:
                        body = answer.render(time.monotonic() - start, speed, zipped)
                        status = b"200 OK"
                    else:
                        body, status, zipped = b"not found\n", b"404 Not Found", False
                    encoding = b"content-encoding: gzip\r\n" if zipped else b""
                    writer.write(
                        b"HTTP/1.1 "
                        + status
                        + b"\r\ncontent-type: text/plain; version=0.0.4\r\n"
                        + encoding
                        + b"content-length: "
                        + str(len(body)).encode()
                        + b"\r\n\r\n"
                        + body
                    )
                    await writer.drain()
            except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
                pass
            finally:
                writer.close()

        return handle

    servers = [
        await asyncio.start_server(handler(speed_of(i)), "127.0.0.1", 0) for i in range(replicas)
    ]
    ports = [s.sockets[0].getsockname()[1] for s in servers]
    tmp = ports_file.with_suffix(".tmp")
    tmp.write_text("\n".join(str(p) for p in ports) + "\n")
    tmp.rename(ports_file)
    await asyncio.Event().wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replicas", type=int, default=100)
    ap.add_argument("--ports-file", type=Path, required=True)
    ap.add_argument("--gzip", action="store_true", help="gzip answers that accept it, as vLLM")
    ap.add_argument(
        "--no-name-filter",
        action="store_true",
        help="no /metrics/ answering ?name[]= (an exporter without prometheus_client's mount)",
    )
    args = ap.parse_args()
    asyncio.run(serve(args.replicas, args.ports_file, args.gzip, not args.no_name_filter))


if __name__ == "__main__":
    main()
