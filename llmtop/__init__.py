"""llmtop: see, name and fix "200 OK but degraded" on self-hosted LLM inference.

`__version__` is the installed distribution's, which hatch-vcs took from the git tag it was built
at (v0.2.0 -> 0.2.0; N commits later 0.2.1.devN+g<hash>); read on first use, since
importlib.metadata is not on the TUI's start-up path. A checkout never installed: `UNKNOWN_VERSION`.
"""

from __future__ import annotations

DISTRIBUTION = "llmtop-console"
"""The name on PyPI (`llmtop` there is an unrelated project); the command stays `llmtop`."""
UNKNOWN_VERSION = "0.0.0+unknown"


def __getattr__(name: str) -> str:
    if name != "__version__":
        raise AttributeError(f"module 'llmtop' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version(DISTRIBUTION)
    except PackageNotFoundError:
        found = UNKNOWN_VERSION
    globals()["__version__"] = found  # asked once
    return found
