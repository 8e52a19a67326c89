"""The vllm:* families a scrape exports (type and label names) and which llmtop reads, to hold the
sim to a real vLLM: `missing_or_different` compares two scrapes, `sim_metrics_after_traffic`
takes the sim's after a few requests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from llmtop.asgi.uvicorn_runner import ServerThread
from llmtop.core.vllm.names import sample_names

FIXTURE = Path(__file__).parents[1] / "fixtures" / "metrics-load.txt"
Shape = tuple[str, frozenset[str]]
"""(Prometheus type, label names without `le`)."""


def families(text: str) -> dict[str, tuple[Shape, frozenset[str]]]:
    """Family name -> ((type, label names), sample names), for every vllm:* family in `text`."""
    out: dict[str, tuple[Shape, frozenset[str]]] = {}
    for fam in text_string_to_metric_families(text):
        if not fam.name.startswith("vllm:"):
            continue
        labels = frozenset(k for s in fam.samples for k in s.labels if k != "le")
        names = frozenset(s.name for s in fam.samples)
        out[fam.name] = ((fam.type, labels), names)
    return out


def read_by_llmtop(text: str) -> dict[str, tuple[Shape, frozenset[str]]]:
    """The vllm:* families of `text` that hold a sample name llmtop reads."""
    keep = sample_names()
    return {name: v for name, v in families(text).items() if v[1] & keep}


def missing_or_different(real_text: str, sim_text: str) -> list[str]:
    """What the sim lacks or exports differently, for every family llmtop reads from `real_text`."""
    keep = sample_names()
    sim = families(sim_text)
    problems = []
    for name, (shape, samples) in sorted(read_by_llmtop(real_text).items()):
        if name not in sim:
            problems.append(f"{name}: not exported by the sim")
            continue
        sim_shape, sim_samples = sim[name]
        if sim_shape != shape:
            problems.append(
                f"{name}: real {shape[0]} {sorted(shape[1])}, sim {sim_shape[0]} "
                f"{sorted(sim_shape[1])}"
            )
        lost = (samples & keep) - sim_samples
        if lost:
            problems.append(f"{name}: sim lacks samples {sorted(lost)}")
    return problems


def sim_metrics_after_traffic(start_sim: Callable[..., ServerThread]) -> str:
    """The sim's /metrics after a few finished requests (histograms have observations)."""
    server = start_sim(profile="fast", model_name="tinyllm")
    with httpx.Client(base_url=server.url, timeout=10.0) as client:
        for i in range(3):
            r = client.post(
                "/v1/completions",
                json={"model": "tinyllm", "prompt": list(range(100 + i)), "max_tokens": 4},
            )
            assert r.status_code == 200, r.text
        return client.get("/metrics").text
