"""The gateway following Kubernetes pods over real HTTP: a real `llmtop gateway --k8s-selector`
process, the emulated API (tests/support/kube_api.py) as `kubectl proxy` serves it, and real
`llmtop sim`s behind its pod proxy. Pods appear, become Ready, leave while streams are in flight
(the streams finish, nothing new goes there), restart; rotation is read from /admin/stats and
from what each engine received; each move is a log line."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from harness.redis_server import redis_server
from harness.terminal import Server, clean_env, wait_until
from llmtop.asgi.uvicorn_runner import ServerThread
from tests.support.gateway_sim import at_engine, engine_of, reached
from tests.support.kube_api import LEFTOVER_SOCKETS, KubeEmulator, in_cluster, pod, pool

Start = Callable[..., ServerThread]
pytestmark = LEFTOVER_SOCKETS
BODY = {"model": "llmtop-sim", "prompt": "hello", "max_tokens": 4}


@pytest.fixture
def kube() -> Iterator[KubeEmulator]:
    emu = KubeEmulator().start()  # plain HTTP: as `kubectl proxy` serves it
    yield emu
    emu.stop()


def proxy_url(emu: KubeEmulator, name: str, port: int = 8000) -> str:
    return f"{emu.url}/api/v1/namespaces/llm/pods/{name}:{port}/proxy"


def gateway(emu: KubeEmulator, tmp_path: Path, *extra: str) -> Server:
    kubeconfig = emu.write_kubeconfig(tmp_path / "kubeconfig")
    args = ["gateway", "--kubeconfig", str(kubeconfig), "--listen", "127.0.0.1:0"]
    args += ["--eject-s", "1", "--drain-grace-s", "0", "--drain-timeout-s", "2"]
    args += extra or ("--k8s-selector", "app=vllm")
    return Server(args, clean_env(tmp_path), tmp_path / "gateway.log")


def replicas(gw: Server | ServerThread) -> dict[str, dict[str, Any]]:
    stats = httpx.get(gw.url + "/admin/stats", timeout=5).json()
    return {r["url"]: r for r in stats["replicas"]}


def states(gw: Server | ServerThread) -> dict[str, str]:
    return {url: r["state"] for url, r in replicas(gw).items()}


async def complete(client: httpx.AsyncClient, n: int) -> list[int]:
    """`n` completions at once: their statuses."""
    answers = await asyncio.gather(*(client.post("/v1/completions", json=BODY) for _ in range(n)))
    return [r.status_code for r in answers]


async def stream(client: httpx.AsyncClient, max_tokens: int) -> tuple[int, int, bool]:
    """One streamed completion: its status, its token events and whether it ended [DONE]."""
    body = {**BODY, "max_tokens": max_tokens, "stream": True}
    tokens, done = 0, False
    async with client.stream("POST", "/v1/completions", json=body) as r:
        async for line in r.aiter_lines():
            if line == "data: [DONE]":
                done = True
            elif line.startswith("data: "):
                tokens += "error" not in json.loads(line[6:])
    return r.status_code, tokens, done


@pytest.mark.slow(15)
async def test_the_gateway_follows_the_pods_as_they_come_and_go(
    kube: KubeEmulator, start_sim: Start, tmp_path: Path
) -> None:
    sims = {name: start_sim(profile="fast") for name in ("vllm-0", "vllm-1", "vllm-2")}
    for name, sim in sims.items():
        kube.backends[f"llm/{name}"] = sim.url
    kube.put(pod("vllm-0", ip="10.0.0.10"))
    kube.put(pod("vllm-1", ip="10.0.0.11", node="node-b"))
    kube.put(pod("other", labels={"app": "redis"}))
    gw = gateway(kube, tmp_path)
    u0, u1, u2 = (proxy_url(kube, n) for n in sims)
    try:
        assert states(gw) == {u0: "ok", u1: "ok"}  # the Ready pods at start
        async with httpx.AsyncClient(base_url=gw.url, timeout=20) as c:
            assert await complete(c, 8) == [200] * 8
            assert reached(engine_of(sims["vllm-0"])) > 0
            assert reached(engine_of(sims["vllm-1"])) > 0

            # a pod that is not Ready is not an upstream; once Ready it joins at its first answer
            kube.put(pod("vllm-2", ip="10.0.0.12", ready=False))
            await asyncio.sleep(0.5)
            assert set(states(gw)) == {u0, u1}
            kube.put(pod("vllm-2", ip="10.0.0.12"))
            wait_until(lambda: states(gw).get(u2) == "ok", "vllm-2 in rotation", 10)
            assert await complete(c, 9) == [200] * 9
            assert reached(engine_of(sims["vllm-2"])) > 0

            # vllm-0 leaves while streams are in flight: they finish, nothing new goes there
            streams = [asyncio.ensure_future(stream(c, 300)) for _ in range(6)]
            await asyncio.to_thread(
                wait_until, lambda: replicas(gw)[u0]["in_flight"] > 0, "a stream at vllm-0", 10
            )
            kube.delete("llm", "vllm-0")
            await asyncio.to_thread(
                wait_until, lambda: states(gw).get(u0) == "draining", "vllm-0 draining", 10
            )
            at_zero = reached(engine_of(sims["vllm-0"]))
            assert await complete(c, 6) == [200] * 6
            assert reached(engine_of(sims["vllm-0"])) == at_zero  # nothing new
            results = await asyncio.gather(*streams)
            assert [(s, n, d) for s, n, d in results] == [(200, 300, True)] * 6
            await asyncio.to_thread(
                wait_until, lambda: u0 not in states(gw), "vllm-0 removed once drained", 10
            )

            # a restart: out of rotation while not Ready, back at its first answer
            kube.put(pod("vllm-1", ip="10.0.0.11", node="node-b", ready=False, restarts=1,
                         last_reason="OOMKilled"))  # fmt: skip
            await asyncio.to_thread(
                wait_until, lambda: u1 not in states(gw), "vllm-1 out while restarting", 10
            )
            before = reached(engine_of(sims["vllm-1"]))
            assert await complete(c, 4) == [200] * 4
            assert reached(engine_of(sims["vllm-1"])) == before
            kube.put(pod("vllm-1", ip="10.0.0.11", node="node-b", restarts=1,
                         last_reason="OOMKilled"))  # fmt: skip
            await asyncio.to_thread(
                wait_until, lambda: states(gw).get(u1) == "ok", "vllm-1 back", 10
            )
            stats = (await c.get("/admin/stats")).json()
        assert stats["offered"] == sum(stats["outcomes"].values())
        assert stats["outcomes"].get("upstream_error", 0) == 0
    finally:
        gw.stop()
    log = gw.log.read_text(errors="replace")
    assert "Traceback" not in log
    assert "-> pods app=vllm in llm" in log  # the banner says what it follows
    for line in (
        f"replica {u2} added; in rotation at its first answer",
        f"replica {u2} in rotation: its first answer",
        f"replica {u0} left: draining, nothing new sent (",
        f"replica {u0} removed (drained)",
        f"replica {u1} removed (it left)",
        "pod llm/vllm-1 restarted (OOMKilled) on node-b; 1 restart in all",
        "pod llm/vllm-0 left",
    ):
        assert line in log, line
    assert (kube.count("list"), kube.count("watch")) == (2, 1)  # the CLI's list, then the feed's


@pytest.mark.slow(6)
async def test_the_gateway_follows_an_inference_pool(
    kube: KubeEmulator, start_sim: Start, tmp_path: Path
) -> None:
    a, b = start_sim(profile="fast"), start_sim(profile="fast")
    kube.backends["llm/vllm-a"], kube.backends["llm/vllm-b"] = a.url, b.url
    kube.put(pool("llama", {"app": "vllm", "tier": "a"}, port=8200))
    kube.put(pod("vllm-a", labels={"app": "vllm", "tier": "a"}))
    kube.put(pod("vllm-b", labels={"app": "vllm", "tier": "b"}, ip="10.0.0.2"))
    gw = gateway(kube, tmp_path, "--inference-pool", "llama")
    ua, ub = proxy_url(kube, "vllm-a", 8200), proxy_url(kube, "vllm-b", 8300)
    try:
        assert states(gw) == {ua: "ok"}  # the pool's pods, at its target port
        async with httpx.AsyncClient(base_url=gw.url, timeout=20) as c:
            assert await complete(c, 3) == [200] * 3
            kube.put(pool("llama", {"app": "vllm", "tier": "b"}, port=8300))  # moved to tier b
            await asyncio.to_thread(
                wait_until, lambda: states(gw) == {ub: "ok"}, "the pool's new pods in rotation", 10
            )
            before = reached(engine_of(a))
            assert await complete(c, 3) == [200] * 3
        assert reached(engine_of(a)) == before
        assert reached(engine_of(b)) == 3
    finally:
        gw.stop()
    log = gw.log.read_text(errors="replace")
    assert "-> InferencePool llama in llm" in log
    assert "InferencePool llm/llama now selects app=vllm,tier=b on port 8300" in log
    assert "Traceback" not in log


@pytest.mark.slow(12)
async def test_shared_limits_hold_while_the_replicas_come_and_go(
    kube: KubeEmulator, start_sim: Start, tmp_path: Path
) -> None:
    """Two gateways, one Redis, max_concurrency 4 in all: however the pods change under them,
    the engines together never hold more than 4 (a draining pod's requests still count)."""
    sims = {f"vllm-{i}": start_sim(profile="fast") for i in range(4)}
    for name, sim in sims.items():
        kube.backends[f"llm/{name}"] = sim.url
    for i in range(3):
        kube.put(pod(f"vllm-{i}", ip=f"10.0.0.{i}"))
    engines = [engine_of(s) for s in sims.values()]
    with redis_server() as redis:
        extra = ("--k8s-selector", "app=vllm", "--redis", redis.url, "--max-concurrency", "4")
        for i in range(2):
            (tmp_path / f"gw{i}").mkdir()
        gws = await asyncio.gather(  # started side by side: each lists, then serves
            *(asyncio.to_thread(gateway, kube, tmp_path / f"gw{i}", *extra) for i in range(2))
        )
        peak, stop = 0, False

        async def watch() -> None:
            nonlocal peak
            while not stop:
                peak = max(peak, sum(at_engine(e) for e in engines))
                await asyncio.sleep(0.002)

        watcher = asyncio.ensure_future(watch())
        try:
            clients = [httpx.AsyncClient(base_url=g.url, timeout=30) for g in gws]
            streams = [asyncio.ensure_future(stream(clients[i % 2], 80)) for i in range(12)]
            await asyncio.sleep(0.3)
            # one leaves with what it holds, one comes. A deleted pod terminates: it is not
            # Ready and still serves until its containers stop (deleted here once the streams
            # are done), so a request the gateway sent before it heard is answered, as in a
            # cluster; a pod gone at once would answer 404 through the API server's proxy.
            kube.put(pod("vllm-0", ip="10.0.0.0", ready=False))
            kube.put(pod("vllm-3", ip="10.0.0.3"))
            results = await asyncio.gather(*streams)
            kube.delete("llm", "vllm-0")
            stop = True
            await watcher
            assert results == [(200, 80, True)] * 12
            stats = [(await c.get("/admin/stats")).json() for c in clients]
            for c in clients:
                await c.aclose()
        finally:
            stop = True
            for g in gws:
                g.stop()
    assert peak <= 4, f"{peak} at the engines together, past the shared 4"
    assert peak >= 3, f"the cap was never reached ({peak}): nothing was tested"
    for s in stats:
        assert s["shared"]["live_gateways"] == 2
        urls = {r["url"] for r in s["replicas"]}
        assert proxy_url(kube, "vllm-3") in urls
        assert proxy_url(kube, "vllm-0") not in urls
    assert reached(engines[3]) > 0  # the new pod took its part


async def test_in_the_cluster_the_gateway_goes_to_the_pod_ips(
    start_sim: Start,
    serve_app: Callable[[Any], ServerThread],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No kubeconfig, in a pod: the service account over HTTPS with its CA, and the traffic
    at each pod's IP and its port named `http` (here loopback and a sim's port), never
    through the API server."""
    import trustme

    from llmtop.gateway.server.app import create_app
    from llmtop.settings import GatewaySettings
    from llmtop.sources.kube.upstreams import PodUpstreams

    ca = trustme.CA()
    emu = KubeEmulator(tls=ca, token="sa-token").start()
    try:
        a, b = start_sim(profile="fast"), start_sim(profile="fast")
        for name, sim in (("vllm-0", a), ("vllm-1", b)):
            port = int(sim.url.rsplit(":", 1)[1])
            emu.put(
                pod(
                    name,
                    ip="127.0.0.1",
                    ports=[
                        {"name": "http", "containerPort": port},
                        {"name": "metrics", "containerPort": 1},
                    ],
                )
            )
        in_cluster(monkeypatch, tmp_path, ca, emu.port)
        feed = PodUpstreams("app=vllm", retry_s=0.05)
        first = await feed.first()
        assert first == (a.url, b.url)  # their IPs and API ports, not the metrics port
        settings = GatewaySettings(upstream=",".join(first), k8s_selector="app=vllm")
        gw = serve_app(create_app(settings, feed=feed))
        async with httpx.AsyncClient(base_url=gw.url, timeout=20) as c:
            assert await complete(c, 6) == [200] * 6
            emu.delete("llm", "vllm-1")
            await asyncio.to_thread(
                wait_until, lambda: [r["url"] for r in httpx.get(gw.url + "/admin/stats",
                                    timeout=5).json()["replicas"]] == [a.url], "vllm-1 gone", 10
            )  # fmt: skip
            before = reached(engine_of(b))
            assert await complete(c, 4) == [200] * 4
        assert reached(engine_of(b)) == before
        assert emu.count("proxy") == 0
        assert {s.authorization for s in emu.seen} == {"Bearer sa-token"}
    finally:
        emu.stop()


async def test_no_pod_ready_at_start_then_one(
    kube: KubeEmulator,
    start_sim: Start,
    serve_app: Callable[[Any], ServerThread],
    tmp_path: Path,
) -> None:
    """None Ready when the gateway starts: it serves, answers that no replica can take a
    request, probes nothing (no stray /health to a default URL), and takes the first pod that
    becomes Ready."""
    from llmtop.gateway.server.app import create_app
    from llmtop.settings import GatewaySettings
    from llmtop.sources.kube.upstreams import PodUpstreams

    sim = start_sim(profile="fast")
    kube.backends["llm/vllm-0"] = sim.url
    kube.put(pod("vllm-0", ready=False))
    kubeconfig = str(kube.write_kubeconfig(tmp_path / "kubeconfig"))
    feed = PodUpstreams("app=vllm", kubeconfig=kubeconfig, retry_s=0.05)
    assert await feed.first() == ()
    gw = serve_app(create_app(GatewaySettings(upstream="", k8s_selector="app=vllm"), feed=feed))
    async with httpx.AsyncClient(base_url=gw.url, timeout=20) as c:
        r = await c.post("/v1/completions", json=BODY)
        assert r.status_code == 503
        assert r.headers["retry-after"] == "1"
        assert "no upstream replica in rotation yet" in r.text
        assert (await c.get("/healthz")).json()["upstream"]["healthy"] is None  # not probed
        kube.put(pod("vllm-0"))
        await asyncio.to_thread(
            wait_until, lambda: states(gw) == {proxy_url(kube, "vllm-0"): "ok"}, "vllm-0 in", 10
        )
        assert await complete(c, 3) == [200] * 3


def test_a_refusal_at_start_is_one_line(
    kube: KubeEmulator, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from llmtop.cli import main

    kube.forbid.add("list")
    kubeconfig = str(kube.write_kubeconfig(tmp_path / "kubeconfig"))
    args = ["gateway", "--k8s-selector", "app=vllm", "--listen", "127.0.0.1:0"]
    assert main([*args, "--kubeconfig", kubeconfig]) == 3  # before it listens
    out, err = capsys.readouterr()
    assert out == ""
    (line,) = err.splitlines()
    assert line.startswith("llmtop: forbidden: cannot list pods in namespace llm")
    assert main([*args, "--vllm", "http://127.0.0.1:1"]) == 2
    assert capsys.readouterr().err == (
        "llmtop: give --vllm (LLMTOP_UPSTREAM) or the Kubernetes pods to follow, not both\n"
    )
    both = [*args, "--inference-pool", "p", "--kubeconfig", kubeconfig]
    assert main(both) == 2
    assert capsys.readouterr().err == "llmtop: give --k8s-selector or --inference-pool, not both\n"
