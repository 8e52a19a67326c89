"""Shared fixtures: real servers on 127.0.0.1 with free ports."""

from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def fixtures_dir() -> Path:
    """tests/fixtures: real vLLM 0.32 captures and captures made from the sim."""
    return FIXTURES
