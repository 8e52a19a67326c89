"""Named workloads for `llmtop demo`: closed-loop streams (N in flight, like users who send again
once answered) whose concurrency changes by phase; pure data, asked `Scenario.at(t)`. Each names
the sim it was shaped for (`sim`) and its health timings (`health`), so its story holds whatever
the defaults; the cap that fixes it is the live finding's (`--apply-cap auto`), not a constant.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from llmtop.errors import UsageError


@dataclass(frozen=True)
class Stream:
    """One kind of traffic: its concurrency in this phase and the shape of its requests."""

    name: str
    concurrency: int
    prompt_tokens: tuple[int, int]
    output_tokens: int
    priority: str | None = None


@dataclass(frozen=True)
class Phase:
    """A stretch of the scenario; streams not named here have concurrency 0."""

    name: str
    duration_s: float
    streams: tuple[Stream, ...]
    note: str
    """What to look at while this phase runs (printed by the demo)."""


@dataclass(frozen=True)
class Scenario:
    """A workload that tells one story; loops when `loop` is set."""

    name: str
    description: str
    phases: tuple[Phase, ...]
    loop: bool = True
    sim: dict[str, Any] = field(default_factory=dict)
    """SimSettings fields this scenario was shaped for (profile, kv_tokens, ...)."""
    health: dict[str, Any] = field(default_factory=dict)
    """HealthSettings fields this scenario needs (shorter windows for a compressed story)."""
    cap_at_s: float | None = None
    """When a scripted run (`demo --headless`) applies the cap if asked without a time."""

    @property
    def cycle_s(self) -> float:
        """Length of one pass through the phases."""
        return sum(p.duration_s for p in self.phases)

    def at(self, t: float) -> tuple[int, Phase]:
        """The phase (index, phase) running `t` seconds after the start; the last one holds
        for ever unless the scenario loops."""
        if t < 0:
            return 0, self.phases[0]
        if self.loop:
            t %= self.cycle_s
        acc = 0.0
        for i, p in enumerate(self.phases):
            acc += p.duration_s
            if t < acc:
                return i, p
        return len(self.phases) - 1, self.phases[-1]

    def stream_names(self) -> tuple[str, ...]:
        """Every stream any phase uses, in first-seen order."""
        names: dict[str, None] = {}
        for p in self.phases:
            for s in p.streams:
                names.setdefault(s.name, None)
        return tuple(names)


def _chat(n: int, lo: int = 256, hi: int = 768, out: int = 256) -> Stream:
    return Stream("chat", n, (lo, hi), out)


def _long(n: int, prompt: int = 4000, out: int = 256) -> Stream:
    return Stream("long-prompts", n, (prompt, prompt), out)


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            name="story",
            description="chat rising to the throughput cliff, then 4,000-token prompts fill the"
            " KV cache (TTFT tens of seconds, 0 errors); cap at what the finding suggests."
            " ~3.5 min, loops",
            phases=(
                Phase("baseline", 30, (_chat(4),), "4 chats: TTFT ~0.1 s, ~34 tok/s each"),
                Phase("rising", 20, (_chat(16),), "16 chats: throughput climbs"),
                Phase("rising", 20, (_chat(32),), "32 chats: throughput ~900 tok/s"),
                Phase(
                    "cliff",
                    25,
                    (_chat(64),),
                    "64 chats: KV full, preemptions; throughput flattens, waiting grows",
                ),
                Phase(
                    "long prompts",
                    100,
                    (_chat(8), _long(24)),
                    "24 x 4,000-token prompts: KV exhausted, TTFT toward a minute, 0 errors;"
                    " type the :cap the finding suggests",
                ),
                Phase("calm", 25, (_chat(4),), "back to 4 chats; the queues drain"),
            ),
            sim={"profile": "seed"},
            cap_at_s=150,
        ),
        Scenario(
            name="quick",
            description="the story compressed for CI (70 s): a tiny fast model with a"
            " 20,480-token KV cache, 1,800-token prompts, 5 s health windows",
            phases=(
                Phase("baseline", 3, (_chat(4, 100, 300, 64),), "4 chats: TTFT ~20 ms"),
                Phase(
                    "long prompts",
                    57,
                    (_chat(4, 100, 300, 64), _long(40, 1800, 128)),
                    "40 x 1,800-token prompts: KV exhausted, TTFT ~4 s; cap at what the finding"
                    " suggests",
                ),
                Phase("calm", 10, (_chat(4, 100, 300, 64),), "back to 4 chats"),
            ),
            sim={"profile": "fast", "kv_tokens": 20480},
            health={"window_s": 5.0, "fire_after_s": 2.0, "clear_after_s": 5.0},
            cap_at_s=14,
        ),
        Scenario(
            name="cliff",
            description="chat only, 4 -> 96 concurrent: throughput flattens past ~32 while"
            " waiting and TTFT climb (the batching cliff). ~2.5 min, loops",
            phases=(
                Phase("4", 20, (_chat(4),), "4 chats"),
                Phase("16", 20, (_chat(16),), "16 chats"),
                Phase("32", 25, (_chat(32),), "32 chats"),
                Phase("64", 30, (_chat(64),), "64 chats: KV full, preemptions"),
                Phase("96", 30, (_chat(96),), "96 chats: more load only adds queueing"),
                Phase("calm", 20, (_chat(4),), "back to 4"),
            ),
            sim={"profile": "seed"},
        ),
        Scenario(
            name="long-prompts",
            description="steady chat, then 24 x 4,000-token prompts at once: KV exhaustion"
            " straight away. ~2 min, loops",
            phases=(
                Phase("baseline", 20, (_chat(8),), "8 chats"),
                Phase(
                    "long prompts",
                    80,
                    (_chat(8), _long(24)),
                    "KV exhausted, TTFT toward a minute; cap at what the finding suggests",
                ),
                Phase("calm", 20, (_chat(8),), "back to 8 chats"),
            ),
            sim={"profile": "seed"},
            cap_at_s=60,
        ),
        Scenario(
            name="steady",
            description="8 chats, nothing else: a healthy engine (no finding should fire)",
            phases=(Phase("steady", 60, (_chat(8),), "8 chats: healthy"),),
            sim={"profile": "seed"},
        ),
    )
}

DEFAULT = "story"


def get_scenario(name: str) -> Scenario:
    """The named scenario, or a UsageError listing them."""
    try:
        return SCENARIOS[name]
    except KeyError:
        known = ", ".join(SCENARIOS)
        raise UsageError(f"unknown scenario {name!r} (known: {known})") from None


def describe_all() -> str:
    """One line per scenario, for --help."""
    return "\n".join(f"  {s.name:<13} {s.description}" for s in SCENARIOS.values())
