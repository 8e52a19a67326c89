"""The labelled families of vLLM's newer features: spec decode per position, cached prompt
tokens by tier, the sleep state, `engine_healthy`, the LoRA info gauge. Pure. Read only when a
scrape has one (`names.LABELLED_FAMILIES`: each comes with its feature). Bad input reads as
unknown and is said (a NaN or Inf gauge, an undefined label value, bad info labels); a counter
going back is a reset.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from llmtop.core.base.raw import Sample
from llmtop.core.base.snapshot import LoraAdapters
from llmtop.core.vllm.names import (
    CACHED_BY_SOURCE,
    ENGINE_HEALTHY,
    LORA_INFO,
    SLEEP_STATE,
    SPEC_PER_POS,
    label_value,
)

SLEEP_STATES = ("awake", "weights_offloaded", "discard_all")
"""vLLM 0.12-0.33's `sleep_state` label values (v1/metrics/loggers.py)."""


@dataclass(frozen=True)
class LabelledScrape:
    """What the labelled families of one scrape say; None = not exported."""

    counters: dict[str, float]
    """``spec_pos:<position>`` -> cumulative accepted tokens (windowed with the counters)."""
    cached_by_source: dict[str, float]
    """Cached prompt tokens by tier since the engine started (not windowed: no finding reads
    it, and keeping it out of the counters keeps every 0.32 scrape on its plan)."""
    sleep_state: str | None = None
    healthy: bool | None = None
    lora: LoraAdapters | None = None
    unread: tuple[str, ...] = ()
    """What could not be read, in words."""


def read_labelled(samples: tuple[Sample, ...]) -> LabelledScrape:
    """The labelled families of a scrape (engines summed; the worst engine's sleep state)."""
    counters: dict[str, float] = {}
    cached: dict[str, float] = {}
    unread: list[str] = []
    sleep: dict[str, float] = {}
    healthy: list[float] = []
    lora: list[Sample] = []
    for s in samples:
        name = s.name
        if name in (SPEC_PER_POS, CACHED_BY_SOURCE):
            label = "position" if name == SPEC_PER_POS else "source"
            value = label_value(s.labels, label)
            if value is None or not math.isfinite(s.value):
                unread.append(f"{name}: a sample without {label} or not finite")
                continue
            into = counters if name == SPEC_PER_POS else cached
            key = "spec_pos:" + value if name == SPEC_PER_POS else value
            into[key] = into.get(key, 0.0) + s.value
        elif name == SLEEP_STATE:
            state = label_value(s.labels, "sleep_state") or ""
            if state not in SLEEP_STATES:
                unread.append(f"{name}: unknown sleep_state {state!r}")
            elif not math.isfinite(s.value):
                unread.append(f"{name}{{sleep_state={state!r}}} is {s.value}")
            else:
                sleep[state] = max(sleep.get(state, 0.0), s.value)
        elif name == ENGINE_HEALTHY:
            if math.isfinite(s.value):
                healthy.append(s.value)
            else:
                unread.append(f"{name} is {s.value}")
        elif name == LORA_INFO:
            lora.append(s)
    adapters = _lora(lora, unread) if lora else None
    return LabelledScrape(
        counters=counters,
        cached_by_source=cached,
        sleep_state=_sleep_state(sleep),
        healthy=None if not healthy else min(healthy) >= 1.0,
        lora=adapters,
        unread=tuple(unread),
    )


def _sleep_state(seen: dict[str, float]) -> str | None:
    """The deepest sleep any engine is in; awake only when an engine says awake = 1 and none
    sleeps (awake = 0 with no level set reads as asleep: vLLM's help text)."""
    if not seen:
        return None
    for state in ("discard_all", "weights_offloaded"):
        if seen.get(state, 0.0) >= 1.0:
            return state
    if "awake" in seen:
        return "awake" if seen["awake"] >= 1.0 else "weights_offloaded"
    return None


def _names(value: str | None) -> tuple[str, ...]:
    return tuple(n for n in (value or "").split(",") if n)


def _lora(found: list[Sample], unread: list[str]) -> LoraAdapters | None:
    """The newest series by value (vLLM sets it to the wall-clock time of the state)."""
    finite = [s for s in found if math.isfinite(s.value)]
    if not finite:
        unread.append(f"{LORA_INFO}: no finite series")
        return None
    newest = max(finite, key=lambda s: s.value)
    raw_max = label_value(newest.labels, "max_lora")
    try:
        max_loras: int | None = int(raw_max or "")
    except ValueError:
        max_loras = None
        unread.append(f"{LORA_INFO}: max_lora {raw_max!r} is not a number")
    return LoraAdapters(
        max_loras=max_loras,
        running=_names(label_value(newest.labels, "running_lora_adapters")),
        waiting=_names(label_value(newest.labels, "waiting_lora_adapters")),
    )
