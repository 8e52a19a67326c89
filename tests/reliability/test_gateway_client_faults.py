"""The gateway when clients misbehave or the operator keeps turning the knobs: clients that drop
the connection while queued and while streaming (RST and FIN), 1,000 queued connections all
dropped at once, and the limits changed every 100 ms under load. After each, the gateway is at
rest with every request counted once and no task or socket left (`assert_recovered`).

The full 10,000 queued connections over sockets is bench/soak_gateway.py; the 10,000 at the
admission level, with real tasks, is test_admission_scale.py.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Callable

import httpx

from tests.support.faults import (
    FIGURES,
    SSE_HEAD,
    FaultUpstream,
    Gateway,
    accounted,
    assert_recovered,
    baseline,
    reset,
    sse_chunk,
    wait_for,
)

BODY = b'{"model": "m", "prompt": "hello", "stream": true}'


async def held_stream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """One chunk, then nothing until the client leaves (a long generation)."""
    writer.write(SSE_HEAD + sse_chunk(0))
    await writer.drain()
    await asyncio.sleep(3600)


async def quick_stream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Three chunks 5 ms apart and the end; no keep-alive."""
    writer.write(SSE_HEAD.replace(b"\r\n\r\n", b"\r\nconnection: close\r\n\r\n"))
    for i in range(3):
        writer.write(sse_chunk(i))
        await writer.drain()
        await asyncio.sleep(0.005)
    writer.write(b"0\r\n\r\n")
    await writer.drain()


async def raw_post(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A generation request on its own connection, written and left waiting."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        b"POST /v1/completions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n%s" % (len(BODY), BODY)
    )
    await writer.drain()
    return reader, writer


async def drop(writer: asyncio.StreamWriter, rst: bool) -> None:
    if rst:
        reset(writer)
    else:
        writer.close()
        await writer.wait_closed()


async def test_clients_leaving_while_queued_and_while_streaming(
    gateway: Callable[..., Gateway], fault_upstream: Callable[..., FaultUpstream]
) -> None:
    up = fault_upstream(held_stream)
    gw = gateway(up.url, max_concurrency=10, max_queue=100)
    base = baseline(gw.probe, (up.port,))
    streaming = []
    for _ in range(10):
        reader, writer = await raw_post(gw.port)
        await asyncio.wait_for(reader.readuntil(b'"i": 0'), 10)  # mid-stream
        streaming.append(writer)
    queued = [(await raw_post(gw.port))[1] for _ in range(40)]
    await wait_for(lambda: gw.probe.stats()["queued"] == 40, what="40 queued")
    assert up.faulting == 10
    # half leave with a reset, half with a clean close
    await asyncio.gather(*(drop(w, rst=i % 2 == 0) for i, w in enumerate(streaming + queued)))
    FIGURES["requests"] += 50
    s = await assert_recovered(gw.probe, base, gw.port, (up.port,))
    assert s["outcomes"]["cancelled"] == 50
    assert s["offered"] == 50
    await wait_for(
        lambda: up.faulting == 0, what=f"upstream saw every abort; pool: {gw.probe.pool_states()}"
    )
    # a freed slot may go to a waiter whose own drop is not yet read; it is aborted upstream
    assert up.requests >= 10


async def test_a_thousand_queued_connections_all_dropped(
    gateway: Callable[..., Gateway],
    fault_upstream: Callable[..., FaultUpstream],
    many_files: int,
) -> None:
    n = 1000
    assert many_files >= 2 * n + 200, "open-files limit too low for this test"
    up = fault_upstream(held_stream)
    gw = gateway(up.url, max_concurrency=1, max_queue=n)
    base = baseline(gw.probe, (up.port,))
    reader, holder = await raw_post(gw.port)
    await asyncio.wait_for(reader.readuntil(b'"i": 0'), 10)
    writers = [holder]
    for _ in range(n // 100):
        batch = await asyncio.gather(*(raw_post(gw.port) for _ in range(100)))
        writers.extend(w for _, w in batch)
    await wait_for(lambda: gw.probe.stats()["queued"] == n, 30, f"{n} queued")
    # one more is refused at once: the queue is full, and says so
    async with httpx.AsyncClient(base_url=gw.url, timeout=10) as c:
        full = await c.post("/v1/completions", content=BODY)
    assert full.status_code == 429
    assert full.json()["error"]["reason"] == "queue_full"
    await asyncio.gather(*(drop(w, rst=True) for w in writers))
    FIGURES["requests"] += n + 2
    s = await assert_recovered(gw.probe, base, gw.port, (up.port,))
    assert s["outcomes"]["cancelled"] == n + 1
    assert s["rejections"]["queue_full"] == 1
    # the holder's freed slot may go to a waiter whose own drop is not yet read: it reaches
    # the upstream and is aborted there too
    await wait_for(lambda: up.faulting == 0, what="every upstream request aborted")
    assert up.requests >= 1


def random_limits(rng: random.Random) -> dict[str, object]:
    """A valid change of one to three limits."""
    choices: dict[str, Callable[[], object]] = {
        "max_concurrency": lambda: rng.randint(1, 6),
        "max_queue": lambda: rng.randint(0, 16),
        "queue_timeout_s": lambda: rng.choice([0.05, 0.2, 1.0, 5.0]),
        "max_inflight_prompt_tokens": lambda: rng.choice([None, 2, 10, 1000]),
        "rate_limit_rpm": lambda: rng.choice([None, None, None, 6000.0, 600.0]),
    }
    fields = rng.sample(sorted(choices), rng.randint(1, 3))
    return {f: choices[f]() for f in fields}


async def test_limits_changed_every_100ms_under_load(
    gateway: Callable[..., Gateway], fault_upstream: Callable[..., FaultUpstream]
) -> None:
    up = fault_upstream(quick_stream)
    # trusted headers: the churn covers priorities and displacement too
    gw = gateway(
        up.url, max_concurrency=4, max_queue=8, queue_timeout_s=1.0, trust_client_headers=True
    )
    base = baseline(gw.probe, (up.port,))
    rng = random.Random(20261129)
    codes: Counter[int] = Counter()
    lost: list[BaseException] = []
    changes = 0
    stop = asyncio.Event()

    async def worker(c: httpx.AsyncClient, k: int) -> None:
        for i in range(25):  # bounded in count; and in time by the deadline below
            if stop.is_set():
                return
            prio = ("high", "normal", "low")[(k + i) % 3]
            try:
                r = await c.post(
                    "/v1/completions",
                    content=BODY,
                    headers={"x-llmtop-priority": prio, "x-llmtop-tenant": f"t{k % 3}"},
                )
            except httpx.HTTPError as e:
                lost.append(e)
                continue
            codes[r.status_code] += 1
            if r.status_code == 200:
                assert r.text.endswith('data: {"i": 2}\n\n'), r.text
            else:
                assert r.status_code == 429, r.text
                assert r.json()["error"]["reason"] in (
                    "queue_full",
                    "queue_timeout",
                    "shed",
                    "displaced",
                    "rate_limited",
                )

    async def churn(c: httpx.AsyncClient) -> None:
        nonlocal changes
        while not stop.is_set():
            r = await c.patch("/admin/limits", json=random_limits(rng))
            assert r.status_code == 200, r.text
            changes += 1
            if rng.random() < 0.2:
                r = await c.post(rng.choice(["/admin/pause", "/admin/resume"]))
                assert r.status_code == 200
            await asyncio.sleep(0.1)

    async with httpx.AsyncClient(base_url=gw.url, timeout=20) as c:
        knob = asyncio.ensure_future(churn(c))
        workers = asyncio.gather(*(worker(c, k) for k in range(8)))
        try:
            await asyncio.wait_for(asyncio.shield(workers), 8.0)
        except TimeoutError:
            stop.set()  # the time bound: stop starting new requests
        stop.set()
        await knob
        # leave the knobs where everyone can finish
        await c.post("/admin/resume")
        await c.patch(
            "/admin/limits",
            json={"max_concurrency": 8, "max_queue": 64, "rate_limit_rpm": None},
        )
        await workers
    sent = sum(codes.values()) + len(lost)
    FIGURES["requests"] += sent
    FIGURES["lost"] += len(lost)
    assert not lost, lost
    assert changes >= 10
    assert codes[200] > 0
    s = await assert_recovered(gw.probe, base, gw.port, (up.port,))
    accounted(s)
    assert s["offered"] == sent
    assert s["outcomes"]["completed"] == codes[200]
    assert s["outcomes"]["rejected"] + s["outcomes"]["timed_out"] == codes[429]
    assert s["outcomes"]["upstream_error"] == 0
    assert s["in_flight_prompt_tokens"] == 0
