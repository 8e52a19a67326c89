"""The gateway's history: what it costs on disk and in CPU, and why SQLite.

- `--part store`: the store chosen against the other candidate, over one hour of one engine at
  1 s (3,600 polls of the real vLLM 0.32 capture under steady load, bench_recording.py's, and a
  real /admin/stats document moving each poll): SQLite as the gateway writes it (a row a poll,
  zlib with the previous row as its dictionary, a transaction a batch of 5) against segment
  files in the recording format (gzip, a sync flush a batch, a file per 10 minutes): write cost
  per poll (encoding included), bytes an hour, reading "since 1h" back as the recording the
  admin API sends, and pruning the oldest 10 minutes.
- `--part bytes`: bytes an hour on disk for one engine and for 8 replicas, through the
  gateway's own keeper on a fake clock (virtual time: an hour in seconds).
- `--part cpu`: the gateway's CPU with history on and off, side by side in one run, at about
  1,000 relayed chunks a second (16 streams, a chunk each 16 ms) and idle; each `llmtop
  gateway` its own process in front of one upstream process that streams chunks and answers
  /metrics with the capture; rounds alternate on and off, so a busy box weighs on both alike.

    python bench/bench_history.py                     # all three, markdown
    python bench/bench_history.py --part cpu --rounds 3 --seconds 30

Loopback only; bounded (every phase has a count or a deadline).
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import multiprocessing as mp
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_recording import Load  # noqa: E402
from bench_relay import lifespan_or_body  # noqa: E402

from llmtop.core.base.raw import RawEngine, RawPoll  # noqa: E402
from llmtop.core.exposition import promtext  # noqa: E402
from llmtop.core.record.decode import read_recording_bytes  # noqa: E402
from llmtop.core.record.encode import Encoder, header  # noqa: E402
from llmtop.core.vllm.names import sample_names  # noqa: E402
from llmtop.gateway.history.keeper import HistoryKeeper  # noqa: E402
from llmtop.gateway.history.store import HistoryStore, read_lines  # noqa: E402
from llmtop.gateway.server.app import create_app  # noqa: E402
from llmtop.settings import GatewaySettings  # noqa: E402

HOUR = 3600
T0 = 1_800_000_000.0
CAPTURE = ROOT / "tests/fixtures/metrics-load.txt"


# ---- an hour of polls ---------------------------------------------------------------------


def stats_doc(replicas: int) -> dict[str, Any]:
    """A real /admin/stats document of a gateway in front of `replicas` engines."""
    urls = ",".join(f"http://10.0.0.{i}:8000" for i in range(replicas))
    app: Any = create_app(GatewaySettings(upstream=urls))
    return dict(app.state.gateway.stats())


def moved(doc: dict[str, Any], i: int, rng: random.Random) -> dict[str, Any]:
    """The document of poll `i`: its live figures and counters moving as under load."""
    d: dict[str, Any] = json.loads(json.dumps(doc))
    d["time"] = T0 + i
    d["in_flight"] = rng.randint(6, 8)
    d["queued"] = rng.randint(10, 30)
    d["queued_ages_s"] = sorted(
        (round(rng.uniform(0, 20), 3) for _ in range(d["queued"])), reverse=True
    )
    d["offered"] = i * 3
    d["outcomes"] |= {"completed": i * 2, "rejected": i // 50, "timed_out": i // 90}
    d["queue_wait_s"] = {"p50": round(rng.uniform(1, 5), 3), "p95": round(rng.uniform(5, 20), 3)}
    d["ttft_s"] = {"p50": round(rng.uniform(1, 5), 3), "p95": round(rng.uniform(5, 25), 3)}
    d["handler_s"] = {
        "p50": round(rng.uniform(1e-4, 3e-4), 6),
        "p95": round(rng.uniform(3e-4, 1e-3), 6),
    }
    d["oldest_queued_s"] = d["queued_ages_s"][0] if d["queued_ages_s"] else None
    for r in d["replicas"]:
        r["in_flight"] = rng.randint(0, 8)
        r["sent"] = i * 2 + rng.randint(0, 2)
        r["request_tok_per_s"] = round(rng.uniform(800, 1100), 1)
        r["request_seconds"] = round(i * 7.1, 1)
    return d


def polls(n: int, replicas: int) -> list[RawPoll]:
    base = promtext.parse(CAPTURE.read_text(), promtext.keep_names(sample_names()))
    loads = [Load(base, seed=7 + k) for k in range(replicas)]
    doc, rng = stats_doc(replicas), random.Random(11)
    return [
        RawPoll(
            time=T0 + i,
            engines=tuple(
                RawEngine(f"http://10.0.0.{k}:8000", load.step(), engine="vllm")
                for k, load in enumerate(loads)
            ),
            gateway_url="http://127.0.0.1:9000",
            gateway=moved(doc, i, rng),
        )
        for i in range(n)
    ]


# ---- the two stores -----------------------------------------------------------------------


def encoded(data: list[RawPoll]) -> tuple[list[tuple[float, bool, bytes]], float]:
    """Each poll's recording line (the Encoder both stores use), and its cost per poll."""
    enc = Encoder()
    t0 = time.perf_counter()
    lines = []
    for raw in data:
        line = enc.encode(raw)
        lines.append(
            (raw.time, bool(line.get("kf")), json.dumps(line, separators=(",", ":")).encode())
        )
    return lines, (time.perf_counter() - t0) / len(data)


def sqlite_store(lines: list[tuple[float, bool, bytes]], folder: Path) -> dict[str, float]:
    """The gateway's store: a transaction a batch of 5, read back as the admin API sends it."""
    path = folder / "gateway-9000.sqlite"
    store = HistoryStore(path)
    store.begin_segment(header(1.0, {}, T0))
    t0 = time.perf_counter()
    for i in range(0, len(lines), 5):
        store.append(lines[i : i + 5])
    write_s = time.perf_counter() - t0
    wal = store.size_bytes() - path.stat().st_size  # 1 MB at most while running
    store._con.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # folded in, as at close
    size = path.stat().st_size
    t0 = time.perf_counter()
    blob = b"".join(read_lines(path, T0))
    serve_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    assert len(read_recording_bytes(blob)) == len(lines)
    decode_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    store.prune(T0 + len(lines), len(lines) - 600, 10**9)
    prune_s = time.perf_counter() - t0
    store.close()
    assert wal <= 2.2e6, wal
    return {"write_ms": write_s / len(lines) * 1e3, "bytes": size, "serve_s": serve_s,
            "decode_s": decode_s, "prune_ms": prune_s * 1e3}  # fmt: skip


def segment_store(lines: list[tuple[float, bool, bytes]], folder: Path) -> dict[str, float]:
    """The candidate: the recording format itself, a gzip file per 10 minutes, a sync flush
    a batch of 5 (what a crash keeps, as a SQLite commit)."""
    seg = folder / "segments"
    seg.mkdir()
    files: list[Path] = []
    f: Any = None
    t0 = time.perf_counter()
    for i in range(0, len(lines), 5):
        if i % 600 == 0:
            if f is not None:
                f.close()
            files.append(seg / f"{int(lines[i][0])}.jsonl.gz")
            f = gzip.open(files[-1], "ab", compresslevel=6)  # noqa: SIM115 (kept open)
            f.write(json.dumps(header(1.0, {}, lines[i][0])).encode() + b"\n")
        for _, _, text in lines[i : i + 5]:
            f.write(text + b"\n")
        f.flush(zlib.Z_SYNC_FLUSH)
    f.close()
    write_s = time.perf_counter() - t0
    size = sum(p.stat().st_size for p in files)
    t0 = time.perf_counter()
    blob = b"".join(p.read_bytes() for p in files)  # served as they are: gzip members
    serve_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    assert len(read_recording_bytes(blob)) == len(lines)
    decode_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    files[0].unlink()
    prune_s = time.perf_counter() - t0
    return {"write_ms": write_s / len(lines) * 1e3, "bytes": size, "serve_s": serve_s,
            "decode_s": decode_s, "prune_ms": prune_s * 1e3}  # fmt: skip


def keeper_bytes(data: list[RawPoll], folder: Path) -> int:
    """The gateway's keeper as it runs (its thread's step driven here on a fake clock): the
    file's bytes once its write-ahead log is folded in."""
    clock = [T0]
    k = HistoryKeeper(
        folder / "gateway-9000.sqlite",
        max_age_s=86400.0,
        max_bytes=10**9,
        targets={"vllm": ["http://10.0.0.0:8000"]},
        clock=lambda: clock[0],
    )
    for i in range(0, len(data), 5):
        for raw in data[i : i + 5]:
            k.put(raw)
        clock[0] = data[min(i + 4, len(data) - 1)].time
        k.flush()
    assert k.on, k.why_off
    k.close()
    return (folder / "gateway-9000.sqlite").stat().st_size


def part_store() -> None:
    lines, encode_s = encoded(polls(HOUR, 1))
    rows = []
    for name, fn in (
        ("SQLite (chosen)", sqlite_store),
        ("segment files (.jsonl.gz)", segment_store),
    ):
        with tempfile.TemporaryDirectory() as d:
            rows.append((name, fn(lines, Path(d))))
    print("### The store: SQLite against segment files (`--part store`)\n")
    print("One hour of one engine at 1 s (3,600 polls), written in batches of 5 polls.\n")
    print("| store | write per poll | MB per hour | serve since 1h | decode it | prune 10 min |")
    print("|---|---|---|---|---|---|")
    for name, r in rows:
        print(f"| {name} | {r['write_ms']:.3f} ms | {r['bytes'] / 1e6:.2f} | {r['serve_s']:.2f} s |"
              f" {r['decode_s']:.2f} s | {r['prune_ms']:.1f} ms |")  # fmt: skip
    print(f"\nEncoding a poll (the same Encoder for both, on the writer's thread):"
          f" {encode_s * 1e3:.2f} ms.\n")  # fmt: skip


def part_bytes() -> None:
    print("### Bytes on disk (`--part bytes`)\n")
    print("| gateway in front of | MB per hour | MB per day (cap 200 MB) |")
    print("|---|---|---|")
    for replicas in (1, 8):
        n = HOUR if replicas == 1 else 900  # 8 replicas: a quarter hour, scaled to the hour
        data = polls(n, replicas)
        with tempfile.TemporaryDirectory() as d:
            size = keeper_bytes(data, Path(d)) * HOUR / n
        print(f"| {replicas} engine{'s' if replicas > 1 else ''} | {size / 1e6:.2f} |"
              f" {size * 24 / 1e6:.0f} |")  # fmt: skip
    print()


# ---- CPU --------------------------------------------------------------------------------------

CHUNK = b'data: {"choices": [{"text": "token"}]}\n\n'
BODY = b'{"model": "m", "prompt": "hello", "max_tokens": 64, "stream": true}'


async def upstream_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """An engine: /metrics the real capture, /health 200, anything else 64 SSE chunks 16 ms
    apart."""
    if await lifespan_or_body(scope, receive, send):
        return
    path = scope["path"]
    if path in ("/metrics", "/health"):
        body = CAPTURE.read_bytes() if path == "/metrics" else b""
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/plain; version=0.0.4")]})  # fmt: skip
        await send({"type": "http.response.body", "body": body})
        return
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/event-stream")]})  # fmt: skip
    for _ in range(64):
        await send({"type": "http.response.body", "body": CHUNK, "more_body": True})
        await asyncio.sleep(0.016)
    await send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})


def _serve_upstream(q: Any) -> None:
    import uvicorn

    from llmtop.asgi.uvicorn_runner import bind, url_of

    sock = bind("127.0.0.1", 0)
    q.put(url_of(sock))
    config = uvicorn.Config(upstream_app, log_level="error", access_log=False, lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])


class Gateway:
    """`llmtop gateway` in its own process, history on (in `folder`) or off."""

    def __init__(self, upstream: str, folder: Path | None) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
        cmd = [
            sys.executable,
            "-m",
            "llmtop",
            "gateway",
            "--vllm",
            upstream,
            "--listen",
            "127.0.0.1:0",
            "--max-concurrency",
            "4096",
            "--drain-grace-s",
            "0",
        ]
        cmd += ["--history-dir", str(folder)] if folder else ["--no-history"]
        self.proc = subprocess.Popen(
            cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().decode().split(" on ", 1)[1].split()[0]

    def cpu_s(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


async def stream_for(url: str, seconds: float, conc: int) -> int:
    """`conc` clients streaming back to back for `seconds`; the chunks relayed."""
    end = time.monotonic() + seconds
    chunks = 0

    async def client(s: aiohttp.ClientSession) -> None:
        nonlocal chunks
        while time.monotonic() < end:
            async with s.post(url + "/v1/completions", data=BODY) as r:
                assert r.status == 200, r.status
                async for _ in r.content.iter_any():
                    chunks += 1

    timeout = aiohttp.ClientTimeout(total=seconds + 60)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=timeout) as s:
        await asyncio.gather(*(client(s) for _ in range(conc)))
    return chunks


async def cpu_frac(gw: Gateway, seconds: float, conc: int) -> tuple[float, float]:
    """(the gateway's CPU in cores, chunks a second) over `seconds` of `conc` streams (0:
    idle)."""
    c0, t0 = gw.cpu_s(), time.monotonic()
    chunks = await stream_for(gw.url, seconds, conc) if conc else 0
    if not conc:
        await asyncio.sleep(seconds)
    wall = time.monotonic() - t0
    return (gw.cpu_s() - c0) / wall, chunks / wall


async def part_cpu(rounds: int, seconds: float) -> None:
    q: Any = mp.get_context("spawn").Queue()
    up = mp.get_context("spawn").Process(target=_serve_upstream, args=(q,), daemon=True)
    up.start()
    upstream = q.get(timeout=30)
    results: dict[tuple[str, int], list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory() as d:
        gws = {"on": Gateway(upstream, Path(d)), "off": Gateway(upstream, None)}
        try:
            await asyncio.sleep(3)  # both up, history's file open
            for _ in range(rounds):
                for conc in (16, 0):
                    for name, gw in gws.items():
                        results.setdefault((name, conc), []).append(
                            await cpu_frac(gw, seconds, conc)
                        )
            async with aiohttp.ClientSession() as s, s.get(gws["on"].url + "/admin/stats") as r:
                history = (await r.json())["history"]
        finally:
            for gw in gws.values():
                gw.stop()
    up.terminate()
    print("### The gateway's CPU, history on and off (`--part cpu`)\n")
    print(
        f"{rounds} rounds of {seconds:g} s each, alternating; medians. History on: "
        f"{history['polls_written']} polls written, {history['polls_dropped']} dropped.\n"
    )
    print("| load | chunks/s | CPU, history off | CPU, history on | history's cost |")
    print("|---|---|---|---|---|")
    for conc, label in ((16, "16 streams"), (0, "idle")):
        off = [c for c, _ in results[("off", conc)]]
        on = [c for c, _ in results[("on", conc)]]
        rate = statistics.median(r for _, r in results[("on", conc)] + results[("off", conc)])
        cost = statistics.median(on) - statistics.median(off)
        print(
            f"| {label} | {rate:,.0f} | {statistics.median(off) * 100:.2f} % |"
            f" {statistics.median(on) * 100:.2f} % | {cost * 100:+.2f} % of a core |"
        )
    print()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--part", choices=("store", "bytes", "cpu", "all"), default="all")
    ap.add_argument("--rounds", type=int, default=3, help="CPU rounds")
    ap.add_argument("--seconds", type=float, default=20.0, help="each CPU measurement")
    args = ap.parse_args()
    print("## History in the gateway (bench/bench_history.py)\n")
    if args.part in ("store", "all"):
        part_store()
    if args.part in ("bytes", "all"):
        part_bytes()
    if args.part in ("cpu", "all"):
        asyncio.run(part_cpu(args.rounds, args.seconds))


if __name__ == "__main__":
    main()
