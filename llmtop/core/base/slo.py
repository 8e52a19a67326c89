"""What "good" means, once: the TTFT and ITL a request must meet (the `[slo]` settings).

Every judge reads these two numbers and nothing else: the health rules (degraded-200, the
gateway's queue over the SLO, the fleet's outliers), the alert rules file, the gateway's
deadline queue and its autopilot, `llmtop load`'s goodput, the what-if's goodput, snapshot,
the TUI's latency colours and charts, and the report's charts.

One request is good when it ended 200, its TTFT (arrival, gateway queue included, to the
first token) is at most `ttft_s`, and its mean inter-token gap (TPOT) is at most `itl_s`
(`load.stats` judges each): goodput counts those. The monitors see vLLM's histograms, not
requests, so the health rules judge the p95 of the same figures against the same numbers:
more than one request in twenty over the SLO is degraded. The gateway's deadline queue gives
each request `ttft_s` less the engine's recent TTFT to wait in its queue (docs/autopilot.md);
a tenant's `tenant_ttft_slo_s` or a live `slo` limit overrides that for admission only.

Pure: the settings loader (llmtop.settings) fills it from `--ttft-slo-s`/`--itl-slo-s`, the
LLMTOP_TTFT_SLO_S/LLMTOP_ITL_SLO_S variables or the config file's `[slo]` table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from llmtop.errors import ConfigError


def seconds_over_zero(value: Any, where: str) -> float:
    """A finite number of seconds > 0, or a ConfigError naming where it came from."""
    try:
        seconds = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        seconds = math.nan
    if not (seconds > 0 and math.isfinite(seconds)):
        raise ConfigError(f"{where}: expected a number of seconds > 0, got {value!r}")
    return seconds


def _meta(env: str, flag: str) -> dict[str, Any]:
    return {"env": env, "flag": flag, "parse": seconds_over_zero}


@dataclass(frozen=True)
class SloSettings:
    """The service level objective: the latency the endpoint's users were promised."""

    ttft_s: float = field(default=2.0, metadata=_meta("LLMTOP_TTFT_SLO_S", "--ttft-slo-s"))
    """Time to first token, seconds: 2. Interactive chat: a person watches an empty reply
    until the first word; about a second keeps their train of thought, ten loses them. 2 s at
    the p95 keeps most requests near the second, and it is the TTFT bound of MLPerf
    Inference's Llama-2-70B server scenario (ttft_latency = 2000 ms in loadgen's mlperf.conf)."""
    itl_s: float = field(default=0.1, metadata=_meta("LLMTOP_ITL_SLO_S", "--itl-slo-s"))
    """Inter-token latency, seconds: 0.1, i.e. 10 tokens/s, about twice the speed people read
    (~4 words/s, ~5.5 tokens/s), so the text stays ahead of the reader; at MLPerf's 200 ms
    (its server scenario's TPOT bound) a fast reader catches up with the stream and waits."""

    def __post_init__(self) -> None:
        seconds_over_zero(self.ttft_s, "[slo] ttft_s")
        seconds_over_zero(self.itl_s, "[slo] itl_s")
