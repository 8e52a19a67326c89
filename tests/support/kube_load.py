"""The API server's load per poll when llmtop reads N engine pods through its pod proxy, on the
emulated API (tests/support/kube_api.py, HTTPS and a token) serving a real vLLM /metrics capture:
requests and bytes through the proxy per poll, list and watch requests over the run, the poll's
wall time and llmtop's CPU per poll (the emulator's own thread excluded).

    python -m tests.support.kube_load 500 4      # pods, polls
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import trustme

from llmtop.settings import HealthSettings, MonitorSettings
from llmtop.sources.fleet_collector import FleetCollector
from tests.support.kube_api import KubeEmulator, pod
from tests.support.paths import FIXTURES


async def measure(pods: int, polls: int, kubeconfig: Path, emu: KubeEmulator) -> None:
    monitor = MonitorSettings(
        gateway_url=None,
        nvml=False,
        k8s_selector="app=vllm",
        kubeconfig=str(kubeconfig),
        interval_s=5.0,
    )
    collector = FleetCollector(monitor, HealthSettings())
    body = len(emu.metrics_body or b"")
    try:
        for i in range(polls):
            before = emu.count("proxy")
            cpu = time.thread_time()
            start = time.perf_counter()
            snap = await collector.poll()
            wall = time.perf_counter() - start
            cpu = time.thread_time() - cpu
            n = emu.count("proxy") - before
            up = sum(e.up for e in snap.engines)
            print(
                f"poll {i + 1}: {n} proxy requests ({n * body / 1e6:.1f} MB), {up}/{pods} up, "
                f"{wall:.2f} s wall, {cpu:.2f} s of llmtop's CPU"
            )
    finally:
        await collector.aclose()
    print(f"over the run: {emu.count('list')} list, {emu.count('watch')} watch")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("pods", type=int, nargs="?", default=500)
    p.add_argument("polls", type=int, nargs="?", default=4)
    args = p.parse_args()
    body = (FIXTURES / "metrics-load.txt").read_bytes()
    emu = KubeEmulator(tls=trustme.CA(), token="t", metrics_body=body).start()
    try:
        for i in range(args.pods):
            emu.put(pod(f"vllm-{i:04d}"))
        with tempfile.TemporaryDirectory() as tmp:
            kubeconfig = emu.write_kubeconfig(Path(tmp) / "kubeconfig")
            print(f"{args.pods} pods, /metrics of {len(body):,} bytes each (a real vLLM's)")
            asyncio.run(measure(args.pods, args.polls, kubeconfig, emu))
    finally:
        emu.stop()


if __name__ == "__main__":
    main()
