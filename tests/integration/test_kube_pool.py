"""--inference-pool over real HTTP: GAIE's InferencePool (inference.networking.k8s.io/v1) read
from the emulated API (tests/support/kube_api.py), its selector's pods listed and watched, its
target port used, the pool itself watched (a changed selector lists the pods again), its
mistakes in one line, and `llmtop snapshot --inference-pool` reading a real sim through the pod
proxy."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from llmtop.asgi.uvicorn_runner import ServerThread
from llmtop.cli import main
from llmtop.core.pipeline.pods import read_pool
from llmtop.errors import ConfigError, KubeError
from llmtop.sources.kube.discovery import PodDiscovery
from tests.support.kube_api import LEFTOVER_SOCKETS, KubeEmulator, https_api, pod, pool, until

pytestmark = LEFTOVER_SOCKETS

POOL = "vllm-llama"
TIER_A = {"app": "vllm", "tier": "a"}
TIER_B = {"app": "vllm", "tier": "b"}


@pytest.fixture(autouse=True)
def no_local_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMTOP_NVML", "false")
    monkeypatch.delenv("KUBECONFIG", raising=False)


@pytest.fixture
def api_server(tmp_path: Path) -> Iterator[tuple[KubeEmulator, Path]]:
    yield from https_api(tmp_path)


def discovery(kubeconfig: Path, **kwargs: Any) -> PodDiscovery:
    return PodDiscovery("", pool=POOL, kubeconfig=str(kubeconfig), retry_s=0.05, **kwargs)


async def test_the_pool_names_the_pods_and_their_port_and_is_followed(
    api_server: tuple[KubeEmulator, Path],
) -> None:
    emu, kubeconfig = api_server
    emu.put(pool(POOL, TIER_A, port=8200))
    emu.put(pod("vllm-a0", labels=TIER_A, ports=[{"name": "metrics", "containerPort": 9400}]))
    emu.put(pod("vllm-b0", labels=TIER_B, ip="10.0.0.2"))
    pods = discovery(kubeconfig)
    await pods.start()
    try:
        assert pods.selector == "app=vllm,tier=a"
        (target,) = pods.targets()  # the pool's port, not the pod's own metrics port
        assert target.url == f"{emu.url}/api/v1/namespaces/llm/pods/vllm-a0:8200/proxy"
        assert pods.upstream_urls() == ("http://10.0.0.1:8200",)  # by IP: HTTPS needs our token

        await until(lambda: emu.open_watches() == 2, "the pods' and the pool's watches open")
        emu.put(pool(POOL, TIER_B, port=8300))  # the pool moves to tier b: listed again
        await until(lambda: [t.name for t in pods.targets()] == ["vllm-b0"], "tier b listed")
        assert pods.upstream_urls() == ("http://10.0.0.2:8300",)
        kinds = [(e.kind, e.pod) for e in pods.events()]
        assert kinds == [
            ("pool-changed", ""),
            ("pod-deleted", "llm/vllm-a0"),
            ("pod-added", "llm/vllm-b0"),
        ]
        emu.put(pod("vllm-b1", labels=TIER_B, ip="10.0.0.3"))  # the new watch, new selector
        await until(lambda: len(pods.targets()) == 2, "vllm-b1 seen")
        assert [e.kind for e in pods.events()] == ["pod-added"]

        emu.delete_pool("llm", POOL)
        await until(lambda: bool(pods._events), "the pool's deletion said")
        (gone,) = pods.events()
        assert gone.summary == "InferencePool llm/vllm-llama deleted; keeping the 2 pods known"
        assert len(pods.targets()) == 2
    finally:
        await pods.aclose()
    assert (emu.count("pool-get"), emu.count("pool-watch")) == (1, 1)
    assert (emu.count("list"), emu.count("watch")) == (2, 2)  # one of each per selector
    watch = next(s for s in emu.seen if s.kind == "pool-watch")
    assert watch.query["fieldSelector"] == f"metadata.name={POOL}"
    assert {s.authorization for s in emu.seen} == {"Bearer s3cret-token"}


async def test_pool_mistakes_are_one_line(api_server: tuple[KubeEmulator, Path]) -> None:
    emu, kubeconfig = api_server

    async def fails(**kwargs: Any) -> str:
        pods = discovery(kubeconfig, **kwargs)
        try:
            with pytest.raises((KubeError, ConfigError)) as e:
                await pods.start()
        finally:
            await pods.aclose()
        return str(e.value)

    assert (
        await fails()
        == "no InferencePool vllm-llama in namespace llm (kubectl -n llm get inferencepools)"
    )
    emu.put(pool(POOL, {}))
    assert await fails() == "InferencePool vllm-llama has no spec.selector.matchLabels"
    assert await fails(namespace="all") == (
        "InferencePool vllm-llama: a pool is in one namespace; give --k8s-namespace NS (or"
        " none: the context's), not all"
    )
    emu.forbid.add("get inferencepools")
    forbidden = await fails()
    assert forbidden.startswith(
        "forbidden: cannot get inferencepools in namespace llm (inferencepools is forbidden: User"
    )
    assert forbidden.endswith("with --inference-pool also inferencepools get/list/watch"
                              " (docs/kubernetes.md, RBAC)")  # fmt: skip
    emu.forbid.clear()
    emu.pool_crd = False
    assert await fails() == (
        f"the Kubernetes API at {emu.url} (context emulated) serves no"
        " inference.networking.k8s.io/v1 InferencePool: is the Gateway API Inference Extension"
        " (v1.0 or later) installed?"
    )


def test_read_pool_takes_the_v1_shape() -> None:
    spec = read_pool(pool("p", {"tier": "a", "app": "vllm"}, port=8000))
    assert (spec.selector, spec.port) == ("app=vllm,tier=a", 8000)
    no_port = pool("p", {"app": "vllm"})
    no_port["spec"]["targetPorts"] = []
    with pytest.raises(ValueError, match=r"no spec.targetPorts\[\].number"):
        read_pool(no_port)


def test_snapshot_reads_a_pools_pods_through_the_pod_proxy(
    api_server: tuple[KubeEmulator, Path],
    start_sim: Callable[..., ServerThread],
    capsys: pytest.CaptureFixture[str],
) -> None:
    emu, kubeconfig = api_server
    emu.put(pool(POOL, TIER_A, port=8200))
    emu.put(pod("vllm-a0", labels=TIER_A))
    emu.put(pod("vllm-b0", labels=TIER_B))
    emu.backends["llm/vllm-a0"] = start_sim(model_name="pooled").url
    code = main(["snapshot", "--gateway", "off", "--inference-pool", POOL,
                 "--kubeconfig", str(kubeconfig), "--json", "--window-s", "2"])  # fmt: skip
    out, err = capsys.readouterr()
    assert err == ""
    doc = json.loads(out)
    assert code == 0, doc["status"]
    (row,) = doc["fleet"]["replicas"]
    assert (row["name"], row["model"]) == ("vllm-a0", "pooled")
    kube = doc["fleet"]["kubernetes"]
    assert (kube["inference_pool"], kube["selector"], kube["serving"]) == (
        POOL,
        "app=vllm,tier=a",
        1,
    )
    proxied = {s.path.split("/proxy/")[0] for s in emu.seen if s.kind == "proxy"}
    assert proxied == {"/api/v1/namespaces/llm/pods/vllm-a0:8200"}


def test_snapshot_says_a_missing_pool_in_one_line(
    api_server: tuple[KubeEmulator, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _, kubeconfig = api_server
    code = main(["snapshot", "--gateway", "off", "--inference-pool", "nope",
                 "--kubeconfig", str(kubeconfig)])  # fmt: skip
    out, err = capsys.readouterr()
    assert (code, out) == (3, "")
    assert (
        err
        == "llmtop: no InferencePool nope in namespace llm (kubectl -n llm get inferencepools)\n"
    )


def test_a_selector_and_a_pool_are_one_line_on_the_console_too(
    api_server: tuple[KubeEmulator, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """Not the pool silently over the selector: the same line as the gateway's and whatif's."""
    emu, kubeconfig = api_server
    code = main(["snapshot", "--gateway", "off", "--k8s-selector", "app=vllm",
                 "--inference-pool", POOL, "--kubeconfig", str(kubeconfig)])  # fmt: skip
    out, err = capsys.readouterr()
    assert (code, out) == (64, "")  # snapshot's bad usage (EX_USAGE)
    assert err == "llmtop: give --k8s-selector or --inference-pool, not both\n"
    assert emu.seen == []  # refused before any request
