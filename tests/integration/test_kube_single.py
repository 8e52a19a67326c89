"""`llmtop whatif` on one Kubernetes pod over real HTTP: the selector names exactly one Ready pod,
which is read through the emulated API server's pod proxy (HTTPS, its CA, the kubeconfig's
token) while a real `llmtop sim` behind it serves traffic; several or none is one line."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from llmtop.asgi.uvicorn_runner import ServerThread
from llmtop.cli import main
from tests.support.kube_api import LEFTOVER_SOCKETS, KubeEmulator, https_api, pod

pytestmark = LEFTOVER_SOCKETS


@pytest.fixture(autouse=True)
def no_local_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMTOP_NVML", "false")
    monkeypatch.delenv("KUBECONFIG", raising=False)


@pytest.fixture
def api_server(tmp_path: Path) -> Iterator[tuple[KubeEmulator, Path]]:
    yield from https_api(tmp_path)


@pytest.mark.slow(6)
async def test_whatif_reads_the_one_pod_through_the_pod_proxy(
    api_server: tuple[KubeEmulator, Path],
    start_sim: Callable[..., ServerThread],
    capsys: pytest.CaptureFixture[str],
) -> None:
    emu, kubeconfig = api_server
    sim = start_sim(profile="fast")
    emu.put(pod("vllm-0", labels={"app": "vllm", "shard": "0"}))
    emu.put(pod("vllm-1", labels={"app": "vllm", "shard": "1"}))
    emu.backends["llm/vllm-0"] = sim.url
    k8s = ["--kubeconfig", str(kubeconfig)]

    assert await asyncio.to_thread(main, ["whatif", "--k8s-selector", "app=vllm", *k8s]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        "llmtop: whatif reads one engine: --k8s-selector app=vllm names 2 pods Running and Ready"
        " (vllm-0, vllm-1); narrow the selector to one (e.g. add"
        " statefulset.kubernetes.io/pod-name=NAME)\n"
    )

    stop = False

    async def traffic() -> int:
        sent = 0
        body = {"model": "llmtop-sim", "prompt": "hello", "max_tokens": 16}
        async with httpx.AsyncClient(base_url=sim.url, timeout=10) as c:
            while not stop:
                await asyncio.gather(*(c.post("/v1/completions", json=body) for _ in range(4)))
                sent += 4
        return sent

    load = asyncio.ensure_future(traffic())
    args = ["whatif", "--k8s-selector", "app=vllm,shard=0", *k8s, "--window-s", "2",
            "--interval-s", "0.5", "--cap", "2,4", "--horizon-s", "10", "--json"]  # fmt: skip
    try:
        code = await asyncio.to_thread(main, args)
    finally:
        stop = True
        sent = await load
    out, err = capsys.readouterr()
    assert (code, err) == (0, ""), err
    assert sent > 0
    assert json.loads(out)  # the predictions, calibrated from the pod's /metrics
    proxied = [s for s in emu.seen if s.kind == "proxy"]
    assert len(proxied) >= 4  # one a scrape over the window
    assert {s.path for s in proxied} == {"/api/v1/namespaces/llm/pods/vllm-0:8000/proxy/metrics"}
    assert {s.authorization for s in proxied} == {"Bearer s3cret-token"}


def test_whatif_needs_an_engine_or_a_pod_and_not_both(
    api_server: tuple[KubeEmulator, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _, kubeconfig = api_server
    assert main(["whatif"]) == 2
    assert capsys.readouterr().err == (
        "llmtop: give --vllm URL, or one pod: --k8s-selector or --inference-pool\n"
    )
    args = ["whatif", "--vllm", "http://127.0.0.1:1", "--k8s-selector", "app=vllm"]
    assert main([*args, "--kubeconfig", str(kubeconfig)]) == 2
    assert capsys.readouterr().err == (
        "llmtop: give --vllm or the Kubernetes pod to read, not both\n"
    )
    assert main(["whatif", "--k8s-selector", "app=none", "--kubeconfig", str(kubeconfig)]) == 2
    assert "names 0 pods Running and Ready (none)" in capsys.readouterr().err
