"""The one exception tree of llmtop.

Every error a user can cause or meet is one of these; the CLI turns each into a one-line message
on stderr and the exit code below, never a traceback::

    LlmtopError                 1  something went wrong at run time
     ├── UsageError             2  a bad flag, value or combination
     │    ├── ConfigError       2  a bad or missing config file, a bad LLMTOP_* variable
     │    └── LimitError        2  a gateway limit with a wrong field, type or range (.field)
     ├── TargetError            3  a target (vLLM, gateway, dcgm-exporter) is down or unreachable
     │    └── ScrapeError       3  a target answered, but not with exposition text we can read
     ├── ServeError             4  a server could not start: port in use, address refused
     ├── AdminError             5  the gateway's admin API refused a change (401, 400, down)
     └── RecordingError         6  a recording file is missing, truncated or not a recording

`llmtop snapshot` also exits 1 (degraded), 2 (critical) and 3 (unknown) by design: see README.
"""

from __future__ import annotations


class LlmtopError(Exception):
    """Base of every expected llmtop error; carries the process exit code."""

    exit_code: int = 1


class UsageError(LlmtopError):
    """The user asked for something that cannot be done as asked."""

    exit_code = 2


class ConfigError(UsageError):
    """A config file or an LLMTOP_* environment variable holds a bad value."""


class LimitError(UsageError):
    """A limit change with a wrong field, type or range; the admin API answers 400 with it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        """The limit's field name (or the unknown name given)."""
        self.message = message


class TargetError(LlmtopError):
    """A monitored or proxied target cannot be reached."""

    exit_code = 3


class ScrapeError(TargetError):
    """A target answered with something that is not readable Prometheus text."""


class ServeError(LlmtopError):
    """A server llmtop runs could not start (port in use, address refused)."""

    exit_code = 4


class AdminError(LlmtopError):
    """The gateway admin API refused or failed a request."""

    exit_code = 5


class RecordingError(LlmtopError):
    """A recording cannot be read or written."""

    exit_code = 6
