"""The targets file, re-read when it changes (its mtime or size), between polls.

A bad edit does not stop a running llmtop: the previous list stays and `error` says why, until
the file is fixed. Only the first read raises (ConfigError, naming the line).
"""

from __future__ import annotations

import os
from pathlib import Path

from llmtop.core.pipeline.targets import Target, parse_targets
from llmtop.errors import ConfigError


class TargetsFile:
    """`current()` is the file's targets, re-read when the file changed since the last call."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.error: str | None = None
        self._stamp: tuple[int, int] | None = None
        self._targets: tuple[Target, ...] | None = None

    def current(self) -> tuple[Target, ...]:
        """The targets now; ConfigError only when the file cannot be read the first time."""
        try:
            st = self.path.stat()
            stamp = (st.st_mtime_ns, st.st_size)
            if stamp != self._stamp:
                targets = parse_targets(self.path.read_text(encoding="utf-8"), str(self.path))
                self._stamp, self._targets, self.error = stamp, targets, None
        except (OSError, UnicodeDecodeError, ConfigError) as e:
            why = e if isinstance(e, ConfigError) else f"cannot read {self.path}: {e}"
            if self._targets is None:
                raise ConfigError(str(why)) from None
            self.error = f"{why} (still watching the previous {len(self._targets)} targets)"
        assert self._targets is not None
        return self._targets
