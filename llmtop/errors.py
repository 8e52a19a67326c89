"""The one exception tree of llmtop: the CLI turns each into one line on stderr and the exit code
below, never a traceback; each carries its facts as attributes (field, target, line, reason)::

    LlmtopError                 1  something went wrong at run time
     ├── UsageError             2  a bad flag, value or combination
     │    ├── ConfigError       2  a bad or missing config file, a bad LLMTOP_* variable
     │    └── LimitError        2  a gateway limit with a wrong field, type or range (.field)
     ├── TargetError            3  a target (vLLM, gateway, dcgm-exporter) is down or unreachable
     │    ├── ScrapeError       3  it answered, but not with exposition we can read (.target, .line)
     │    ├── GatewayReadError  3  the gateway answered, not as its admin API should (.target,
     │    │                        .is_gateway)
     │    ├── TooManyRequests   3  a 429 to the load generator, which retries or counts it (.reason,
     │    │                        .retry_after_s)
     │    └── KubeError         3  the Kubernetes API is unreachable or refuses (401, 403: .status)
     ├── ServeError             4  a server could not start: port in use, address refused
     ├── AdminError             5  the gateway's admin API refused a change (401, 400, down)
     ├── RecordingError         6  a recording file is missing, truncated or not a recording
     └── Rejected               1  the gateway's 429 (.reason, .retry_after_s): the proxy answers
                                   it, it never reaches a CLI

`llmtop snapshot` also exits 1, 2 and 3 for its verdicts (degraded, critical, unknown).
"""

from __future__ import annotations

import math


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

    def __init__(self, message: str, *, target: str | None = None) -> None:
        super().__init__(message)
        self.target = target
        """The URL that failed, when known."""


class ScrapeError(TargetError):
    """A target answered with something that is not readable Prometheus text."""

    def __init__(self, message: str, *, target: str | None = None, line: int | None = None) -> None:
        super().__init__(message, target=target)
        self.line = line
        """The 1-based line of the exposition text that could not be read, when one is to blame."""


class GatewayReadError(TargetError):
    """The gateway answered, but not as its admin API should."""

    def __init__(self, message: str, *, target: str | None = None, is_gateway: bool = False):
        super().__init__(message, target=target)
        self.is_gateway = is_gateway
        """True when the answer proves an llmtop gateway is there (a 401 from its admin API)."""


class TooManyRequests(TargetError):
    """A 429 seen by the load generator: why (the gateway's reason), and how long to wait."""

    def __init__(self, retry_after_s: float | None, reason: str | None) -> None:
        super().__init__(reason or "429 Too Many Requests")
        self.retry_after_s = retry_after_s
        """Retry-After in seconds, None when the server gave none."""
        self.reason = reason


class KubeError(TargetError):
    """The Kubernetes API cannot be reached, or refuses what discovery asks (names what to fix)."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        """The API's HTTP status (401, 403, 410, ...); None when it gave no answer."""


class ServeError(LlmtopError):
    """A server llmtop runs could not start (port in use, address refused)."""

    exit_code = 4


class AdminError(LlmtopError):
    """The gateway admin API refused or failed a request."""

    exit_code = 5


class RecordingError(LlmtopError):
    """A recording cannot be read or written."""

    exit_code = 6


class Rejected(LlmtopError):
    """A request the gateway refuses with a 429: the reason, a message naming the knob, and
    Retry-After."""

    def __init__(self, reason: str, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.reason = reason
        """queue_full, rate_limited, queue_timeout, displaced, shed, ..."""
        self.message = message
        self.retry_after_s = retry_after_s

    @property
    def retry_after_header(self) -> str:
        """Whole seconds, at least 1, as the Retry-After header wants them."""
        return str(max(1, math.ceil(self.retry_after_s)))
