"""Where the suite's data lives: tests/fixtures (real vLLM captures, recordings, the incident
library) and the repository's root."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
