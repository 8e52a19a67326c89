"""The autopilot judged by vLLM's own benchmark on the real vLLM: `vllm bench serve` (from the
real-vLLM venv) through bench/bench_vllm_serve.py, straight to the engine and through
`llmtop gateway --autopilot`, at a mild load (0.7x the measured capacity) and at 2x.

What it asserts is the issue's ordering, with its slack stated: at 0.7x the autopilot's goodput
(requests within TTFT 5 s and TPOT 100 ms, per offered) is at least 0.95x straight's less one
request (24 prompts: one request is 4 points, more than the noise of a 2-core box allows to
tell apart); at 2x it is above straight's. The full grid (0.7x..3x, and the tree before) is
BENCHMARKS.md, "The judge on the real vLLM", run by hand: it takes ~40 minutes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.real_vllm, pytest.mark.timeout(1800)]


def test_autopilot_never_loses_at_mild_load_and_wins_at_2x(vllm_url: str, tmp_path: Path) -> None:
    n = 24
    cmd = [
        sys.executable,
        str(ROOT / "bench" / "bench_vllm_serve.py"),
        "--engine",
        "real",
        "--vllm-url",
        vllm_url,
        "--loads",
        "0.7,2",
        "--arms",
        "straight,autopilot",
        "--min-prompts",
        str(n),
        "--max-prompts",
        str(n),
        "--calibrate-s",
        "30",
        "--budget-min",
        "25",
        "--out",
        str(tmp_path),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1700, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    rows = json.loads((tmp_path / "summary.json").read_text())["rows"]
    good = {(r["arm"], r["load"]): r["goodput"] for r in rows}
    assert len(good) == 4, (good, done.stdout[-2000:])
    mild_ap, mild_straight = good[("autopilot", 0.7)], good[("straight", 0.7)]
    assert mild_ap >= 0.95 * mild_straight - 1 / n, done.stdout[-3000:]
    assert good[("autopilot", 2.0)] > good[("straight", 2.0)], done.stdout[-3000:]
