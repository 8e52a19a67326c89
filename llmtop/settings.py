"""Settings: frozen dataclasses, one per table of the TOML config file ([monitor], [health], ...).
Precedence: flags > the ``LLMTOP_<FIELD>`` environment variable (unless the field's metadata names
another) > the file (``--config``, default ``$XDG_CONFIG_HOME/llmtop/config.toml``) > the defaults
here. A field that is a section (`HealthSettings.slo`, `GatewaySettings.slo`) reads that section's
table, so every command judges by one ``[slo]``; `describe` renders --help's defaults (no drift)."""

from __future__ import annotations

import dataclasses
import os
import sys
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, Union

from llmtop.core.base.slo import SloSettings as SloSettings  # re-exported: core owns it
from llmtop.core.health.thresholds import (
    HealthSettings as HealthSettings,  # re-exported: core owns it
)
from llmtop.errors import ConfigError, UsageError
from llmtop.tenants import ApiKey, parse_api_keys, parse_tenant_slos

T = TypeVar("T")


def _env(name: str) -> dict[str, str]:
    return {"env": name}


@dataclass(frozen=True)
class MonitorSettings:
    """What the TUI and `llmtop snapshot` watch, and how often."""

    vllm_urls: tuple[str, ...] = field(
        default=("http://127.0.0.1:8000",), metadata=_env("LLMTOP_VLLM")
    )
    """Base URLs of the engines (their /metrics is scraped); comma-separated in the env."""
    engine_kind: str | None = field(
        default=None, metadata={"env": "LLMTOP_ENGINE_KIND", "parse": lambda v, w: _kind(v, w)}
    )
    """The engines' kind (vllm, sglang, llamacpp, trtllm, lmdeploy, tgi, dynamo): their
    /metrics read in that dialect; each detected from its families and info endpoint when unset."""
    gateway_url: str | None = field(
        default="http://127.0.0.1:9000", metadata=_env("LLMTOP_GATEWAY")
    )
    """Base URL of the llmtop gateway; used when it answers."""
    dcgm_url: str | None = field(default=None, metadata=_env("LLMTOP_DCGM"))
    """URL of a dcgm-exporter /metrics for GPUs on another host."""
    interval_s: float = field(default=1.0, metadata=_env("LLMTOP_INTERVAL"))
    """Seconds between polls."""
    read_only: bool = False
    """Disable every key that changes something."""
    nvml: bool = True
    """Read local GPUs through NVML when a driver is present."""
    max_scrape_bytes: int = 8 * 1024 * 1024
    """Read at most this much of a /metrics body; a larger one is an error, not a hang."""
    admin_token: str | None = field(default=None, repr=False)
    """Bearer token for the gateway's admin API (never logged or recorded)."""
    admin_token_file: str | None = None
    """File holding the admin token; read once, by `load` (`resolve_token`), into admin_token."""
    record: str | None = None
    """Append every poll to this recording file (JSON lines, gzip when it ends in .gz)."""
    past_s: float = field(default=3600.0, metadata=_env("LLMTOP_PAST_S"))
    """Seconds of the past the TUI shows at its start, from the gateway's history or
    Prometheus (`--past 1h`); 0 for none (`--no-past`)."""
    targets_file: str | None = field(default=None, metadata=_env("LLMTOP_TARGETS"))
    """File of engine URLs (one a line, an optional name after), re-read when it changes."""
    prometheus_url: str | None = field(default=None, metadata=_env("LLMTOP_PROMETHEUS"))
    """Read every replica through this Prometheus-compatible API instead of scraping them."""
    prometheus_selector: str | None = None
    """PromQL matchers picking the vLLM series, e.g. '{job="vllm"}'."""
    prometheus_window_s: float = 60.0
    """Range of the PromQL rates and quantiles (at least twice Prometheus' scrape interval)."""
    prometheus_replica_label: str = "instance"
    """The Prometheus label that names a replica (e.g. `pod` when the scrape config relabels)."""
    prometheus_gateway_selector: str | None = None
    """PromQL matchers picking the llmtop gateway's series (`llmtop rules`), e.g.
    '{job="llmtop-gateway"}'."""
    narrow_scrape: bool = True
    """Ask a fleet's exporters for only the series llmtop reads where they can (probed)."""
    k8s_selector: str | None = field(default=None, metadata=_env("LLMTOP_K8S_SELECTOR"))
    """Watch the Kubernetes pods with these labels (e.g. 'app=vllm'), each a replica read
    through the API server's pod proxy (docs/kubernetes.md, Discovery)."""
    k8s_namespace: str | None = None
    """The pods' namespace (`all`: every namespace); the context's namespace when unset."""
    k8s_context: str | None = None
    """The kubeconfig context to use; its current context when unset."""
    kubeconfig: str | None = None
    """The kubeconfig file; $KUBECONFIG, else ~/.kube/config, else the pod's service account."""
    inference_pool: str | None = field(default=None, metadata=_env("LLMTOP_INFERENCE_POOL"))
    """Watch the pods of this InferencePool (inference.networking.k8s.io/v1: its selector and
    target port), in --k8s-namespace; instead of k8s_selector."""


@dataclass(frozen=True)
class GatewaySettings:
    """The admission gateway in front of the engine's OpenAI API."""

    upstream: str = "http://127.0.0.1:8000"
    """Base URL of the engine; several replicas comma-separated (or --vllm repeated)."""
    engine_kind: str | None = field(
        default=None, metadata={"env": "LLMTOP_ENGINE_KIND", "parse": lambda v, w: _kind(v, w)}
    )
    """The engine's kind, for the autopilot's reading of its /metrics (as [monitor]'s)."""
    k8s_selector: str | None = field(default=None, metadata=_env("LLMTOP_K8S_SELECTOR"))
    """Follow the Ready Kubernetes pods with these labels: they are the upstreams, a new one in
    rotation at its first answer, one that leaves drained (docs/kubernetes.md)."""
    inference_pool: str | None = field(default=None, metadata=_env("LLMTOP_INFERENCE_POOL"))
    """Follow the Ready pods of this InferencePool instead (its selector and target port)."""
    k8s_namespace: str | None = None
    """The pods' namespace (`all`: every namespace); the context's namespace when unset."""
    k8s_context: str | None = None
    """The kubeconfig context to use; its current context when unset."""
    kubeconfig: str | None = None
    """The kubeconfig file; $KUBECONFIG, else ~/.kube/config, else the pod's service account."""
    replica_max_concurrency: int | None = None
    """Requests allowed at each replica at once; off when unset (max_concurrency is the whole)."""
    eject_s: float = 5.0
    """Seconds a replica that refused, timed out or 5xx'd gets no traffic (then /health decides)."""
    redis_url: str | None = field(default=None, metadata=_env("LLMTOP_REDIS"))
    """Redis holding the limits several gateways share (redis://host:port/db); off when unset."""
    lease_ttl_s: float = 3.0
    """Seconds a gateway's Redis lease outlives its last renewal (a dead gateway's slots return)."""
    replica_deadline_s: float = 2.0
    """Seconds a replica may leave its /health unanswered before it is out of rotation (a
    hung engine refuses nothing; it is back when it answers)."""
    drain_grace_s: float = 5.0
    """Seconds after SIGTERM that new requests are still served while /readyz fails (the time
    a load balancer takes to stop sending; docs/gateway.md)."""
    drain_timeout_s: float = 120.0
    """Seconds after the grace that requests in flight may take to finish; then each is cut
    with an error (a stream gets an error event)."""
    listen: str = "127.0.0.1:9000"
    """host:port to listen on."""
    max_concurrency: int = 8
    """Requests allowed at the engine at once."""
    max_queue: int = 128
    """Requests allowed to wait in the gateway; more get 429."""
    queue_timeout_s: float = field(default=30.0, metadata=_env("LLMTOP_QUEUE_TIMEOUT"))
    """Seconds a request may wait in the queue before a 429."""
    rate_limit_rpm: float | None = None
    """Requests per minute per tenant (token bucket); off when unset."""
    max_inflight_prompt_tokens: int | None = None
    """Cap on the summed prompt tokens of the requests in flight; off when unset."""
    max_inflight_kv_blocks: int | None = None
    """Cap on the summed predicted KV footprint (blocks) in flight; the autopilot moves it."""
    max_unprefilled_prompt_tokens: int | None = None
    """Cap on the prompt tokens admitted and not yet prefilled (no first token yet); off when
    unset; the autopilot sets it from the engine's measured prefill rate."""
    slo: SloSettings = field(default_factory=SloSettings)
    """The SLO (the `[slo]` section): a request's TTFT budget, gateway queue included, that the
    deadline queue works to, and the ITL the autopilot keeps the engine under."""
    queue_policy: str = "fifo"
    """fifo, deadline, codel or lifo: how the gateway's queue meets overload (deadline with
    --autopilot)."""
    mode: str = "manual"
    """auto: the autopilot moves the KV budget to hold the SLO; manual: only people do."""
    autopilot: bool = False
    """Start in auto mode with a deadline queue: admit by KV footprint, the budget moved by the
    engine's signals (docs/autopilot.md)."""
    max_body_bytes: int = 10 * 1024 * 1024
    """Largest request body accepted (413 beyond)."""
    max_header_bytes: int = 64 * 1024
    """Largest request header block accepted (431 beyond); uvicorn itself sets no limit."""
    upstream_connect_timeout_s: float = 5.0
    """Seconds to connect to the upstream before a 502."""
    upstream_read_timeout_s: float = 300.0
    """Seconds of upstream silence before a 504 (or a terminated stream)."""
    admin_token: str | None = field(default=None, repr=False)
    """Bearer token the admin API requires; without it only loopback listening is allowed."""
    admin_token_file: str | None = None
    """File holding the admin token; read once, by `load` (`resolve_token`), into admin_token."""
    trust_client_headers: bool = False
    """Take x-llmtop-priority and x-llmtop-tenant from clients as sent: only behind a proxy
    that authenticates callers and sets both; otherwise the key table decides."""
    engine_priority: bool = False
    """Stamp vLLM's `priority` field (high -1, normal 0, low 1) on admitted generation requests,
    for a vLLM started with --scheduling-policy priority: the gateway's order holds inside it."""
    api_keys: tuple[ApiKey, ...] = field(default=(), metadata={"parse": parse_api_keys})
    """Key table: tenant and highest priority per API key, keys stored as SHA-256 hex."""
    tenant_ttft_slo_s: tuple[tuple[str, float], ...] = field(
        default=(), metadata={"parse": parse_tenant_slos}
    )
    """Per-tenant TTFT budgets (`{batch = 60}`): an override of [slo] ttft_s for admission
    only (the deadline queue); what the monitors judge stays the SLO."""
    history: bool = True
    """Keep the recent past (the engines' figures and the gateway's own, each second) in a file
    served by /admin/history (docs/recording.md, "History in the gateway"); `--no-history`."""
    history_dir: str | None = field(default=None, metadata=_env("LLMTOP_HISTORY_DIR"))
    """Folder of the history files (gateway-<port>.sqlite); $XDG_STATE_HOME/llmtop when unset
    (~/.local/state/llmtop)."""
    history_max_age_s: float = 86400.0
    """Seconds of history kept (`--history-max-age 24h`)."""
    history_max_mb: float = 200.0
    """Megabytes the history file may hold; the oldest polls go first."""


def _engine_kind(value: Any, where: str) -> str:
    """An engine kind (`core.dialects`), or one line naming the choices."""
    from llmtop.core.dialects.catalog import dialect_of

    try:
        return dialect_of(str(value).strip()).kind
    except UsageError as e:
        raise ConfigError(f"{where}: {e}") from None


def _kind(value: Any, where: str) -> str | None:
    """`--engine-kind`: an engine kind, or None (off, auto: detected)."""
    text = str(value).strip()
    return None if text.lower() in ("", "off", "none", "auto") else _engine_kind(text, where)


@dataclass(frozen=True)
class SimSettings:
    """The simulated vLLM engine."""

    host: str = field(default="127.0.0.1", metadata=_env("LLMTOP_SIM_HOST"))
    """Address to listen on."""
    port: int = field(default=8000, metadata=_env("LLMTOP_SIM_PORT"))
    """Port to listen on (0 picks a free one)."""
    profile: str = field(default="seed", metadata=_env("LLMTOP_SIM_PROFILE"))
    """Hardware/model profile (seed, h100-8b, fast), or a JSON file of a profile's fields."""
    model_name: str = field(default="llmtop-sim", metadata=_env("LLMTOP_SIM_MODEL"))
    """Served model name."""
    max_num_seqs: int | None = None
    """vLLM's --max-num-seqs; the profile's default when unset."""
    max_model_len: int | None = None
    """vLLM's --max-model-len; the profile's default when unset."""
    max_num_batched_tokens: int | None = None
    """vLLM's --max-num-batched-tokens; the profile's default when unset."""
    kv_tokens: int | None = None
    """KV-cache capacity in tokens; derived from the profile when unset."""
    max_num_queued_reqs: int | None = None
    """vLLM 0.32's native admission limit (503 beyond); off when unset."""
    fault: str | None = None
    """Faults to have, NAME[@SECONDS after start][+FOR SECONDS], comma-separated:
    scheduler-stuck (admits nothing, for good, while /health and /metrics answer), slow (each
    step 5x as long), garbage (generation answered with bytes no HTTP client takes); none when
    unset (llmtop/sim/faults.py, docs/sim.md)."""
    dialect: str = field(
        default="vllm", metadata={"env": "LLMTOP_SIM_DIALECT", "parse": _engine_kind}
    )
    """The engine whose /metrics names and info endpoint the sim speaks, a kind of
    `core.dialects.catalog.KINDS` (docs/sim.md); the engine model is vLLM's either way."""


def default_config_path() -> Path:
    """The config file read when --config is not given."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "llmtop" / "config.toml"


def read_config(path: str | Path | None) -> dict[str, Any]:
    """Read the TOML config; a missing default file is fine, a missing named one is not."""
    explicit = path is not None
    p = Path(path) if path is not None else default_config_path()
    if not p.exists():
        if explicit:
            raise ConfigError(f"config file not found: {p}")
        return {}
    if sys.version_info >= (3, 11):  # imported here: most starts have no config file
        import tomllib
    else:  # pragma: no cover - exercised on 3.10 only
        import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]
    try:
        with p.open("rb") as f:
            data: dict[str, Any] = tomllib.load(f)
            return data
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"config file {p}: {e}") from None
    except OSError as e:
        raise ConfigError(f"config file {p}: {e.strerror}") from None


def env_name(f: dataclasses.Field[Any]) -> str:
    """The environment variable of a settings field."""
    return str(f.metadata.get("env", f"LLMTOP_{f.name.upper()}"))


def _section_name(cls: type[Any]) -> str:
    return cls.__name__.removesuffix("Settings").lower()


def _coerce(value: Any, tp: Any, where: str) -> Any:
    """Turn a config or env value into the field's type, or say which setting is wrong."""
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None or (
            isinstance(value, str) and value.strip().lower() in ("", "none", "off")
        ):
            return None
        return _coerce(value, args[0], where)
    if origin is tuple:
        items = value.split(",") if isinstance(value, str) else value
        if not isinstance(items, list | tuple):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        return tuple(str(i).strip() for i in items if str(i).strip())
    if tp is bool:
        if isinstance(value, bool):
            return value
        s = str(value).strip().lower()
        if s in ("1", "true", "yes", "on"):
            return True
        if s in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{where}: expected true or false, got {value!r}")
    if tp in (int, float):
        if isinstance(value, bool):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        try:
            return tp(value)
        except (TypeError, ValueError):
            raise ConfigError(
                f"{where}: expected {'an integer' if tp is int else 'a number'}, got {value!r}"
            ) from None
    if tp is str:
        if not isinstance(value, str | int | float):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        return str(value)
    raise ConfigError(f"{where}: unsupported setting type {tp!r}")  # pragma: no cover


def load(
    cls: type[T],
    *,
    flags: Mapping[str, Any] | None = None,
    config: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> T:
    """Build one settings section: flags > LLMTOP_* env > config file > defaults.

    `flags` holds only the flags the user gave (None values are "not given").
    """
    environ = os.environ if environ is None else environ
    section = _section_name(cls)
    config = config or {}
    table = config.get(section, {})
    if not isinstance(table, Mapping):
        raise ConfigError(f"config: [{section}] must be a table")
    hints = typing.get_type_hints(cls)
    known = {
        f.name
        for f in dataclasses.fields(cls)  # type: ignore[arg-type]
        if not dataclasses.is_dataclass(hints[f.name])
    }
    unknown = sorted(set(table) - known)
    if unknown:
        raise ConfigError(f"config: unknown setting [{section}] {unknown[0]}")
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):  # a section of its own: [slo] in [health] and [gateway]
            values[f.name] = load(tp, flags=flags, config=config, environ=environ)  # type: ignore[arg-type]
            continue
        # a field with its own parser (a table of rows) skips the generic coercion
        parse = f.metadata.get("parse") or (lambda v, where, tp=tp: _coerce(v, tp, where))
        if flags is not None and flags.get(f.name) is not None:
            flag = f.metadata.get("flag", f"--{f.name.replace('_', '-')}")
            values[f.name] = parse(flags[f.name], flag)
        elif env_name(f) in environ:
            values[f.name] = parse(environ[env_name(f)], env_name(f))
        elif f.name in table:
            values[f.name] = parse(table[f.name], f"config [{section}] {f.name}")
    return resolve_token(cls(**values))


def describe(cls: type[Any], name: str) -> str:
    """'(default: X; env LLMTOP_X)' for a field, for --help."""
    for f in dataclasses.fields(cls):
        if f.name == name:
            default = f.default
            if isinstance(default, tuple):
                default = ",".join(default)
            shown = "off" if default is None else default
            if f.name == "admin_token":
                shown = "none"
            return f"(default: {shown}; env {env_name(f)}; config [{_section_name(cls)}] {name})"
    raise KeyError(name)


def resolve_token(section: T) -> T:
    """A settings section with its admin token file read: `admin_token` holds the token (the
    file wins over the setting), `admin_token_file` is None. The one read of the file: `load`
    does it, so everything after reads `admin_token`; a section built by hand (tests, the
    demo) goes through it where it is used. Sections without a token pass unchanged."""
    if not hasattr(section, "admin_token_file"):
        return section
    given, token_file = getattr(section, "admin_token", None), section.admin_token_file
    token = read_token(given, token_file)
    if token == given and token_file is None:
        return section
    return dataclasses.replace(section, admin_token=token, admin_token_file=None)  # type: ignore[type-var]


def read_token(token: str | None, token_file: str | None) -> str | None:
    """The admin token from the setting or its file; the file wins when both are given."""
    if token_file:
        try:
            text = Path(token_file).read_text(encoding="utf-8").strip()
        except OSError as e:
            raise ConfigError(f"admin token file {token_file}: {e.strerror}") from None
        if not text:
            raise ConfigError(f"admin token file {token_file} is empty")
        return text
    return token or None
