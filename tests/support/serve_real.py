"""`llmtop serve` on the real vLLM CPU build: where the build and the tiny model live
(LLMTOP_REAL_VLLM_DIR) and reading a process's output up to a line."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

DIR = Path(os.environ.get("LLMTOP_REAL_VLLM_DIR", Path.home() / ".cache/llmtop/real-vllm"))


def lines_until(proc: subprocess.Popen[str], pattern: str, timeout_s: float) -> list[str]:
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if re.search(pattern, line):
            return lines
    raise AssertionError(f"no {pattern!r} in:\n{''.join(lines)}")
