"""System binaries some tests need (promtool and prometheus from Debian's `prometheus`
package, `redis-server`, `tmux`, `prometheus-alertmanager`): found on PATH, else installed once
per session by .ci/install-system-tools (quiet, never fatal); a test skips, naming why, only when
the binary cannot be had."""

from __future__ import annotations

import fcntl
import functools
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

INSTALLER = Path(__file__).resolve().parent.parent / ".ci" / "install-system-tools"


def _which(name: str) -> str | None:
    debian = Path("/usr/bin") / name  # PATH may lack /usr/bin under some runners
    return shutil.which(name) or (str(debian) if debian.exists() else None)


@functools.cache
def _install() -> str:
    """Run the installer once; what it said (its first line), or why it could not run. Under
    xdist each worker may ask: a lock file lets one apt run at a time (the next finds the tools
    there and does nothing)."""
    lock = Path(tempfile.gettempdir()) / "llmtop-install-system-tools.lock"
    try:
        with lock.open("w") as held:
            fcntl.flock(held, fcntl.LOCK_EX)
            done = subprocess.run(
                ["bash", str(INSTALLER)], capture_output=True, text=True, timeout=600
            )
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{INSTALLER.name} failed: {e}"
    said = done.stderr.strip().splitlines()
    return said[0] if said else "the installer gave no reason"


def system_binary(name: str) -> str:
    """The binary's path, installing it when missing; skip the calling test when it cannot be
    had, with the installer's reason."""
    found = _which(name)
    if found:
        return found
    said = _install()
    found = _which(name)
    if found:
        return found
    pytest.skip(f"{name} not installed: {said}")
