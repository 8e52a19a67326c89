"""Kubernetes pods as fleet targets: which pod is an engine to scrape, at which URL, and what
changed between two looks at it (added, deleted, restarted). Pure: `sources/kube` lists and
watches the pods and hands each object (the API's JSON, as a dict) here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import quote

from llmtop.core.pipeline.targets import Target

DEFAULT_ENGINE_PORT = 8000
"""vLLM's port when a pod names none (`vllm serve` listens on 8000)."""
PORT_ANNOTATION = "prometheus.io/port"
PORT_NAMES = ("metrics", "http")
"""Container port names that mark the metrics port, in the order they are preferred."""

PodChange = Literal[
    "pod-added", "pod-deleted", "pod-restarted", "api-away", "api-back", "pool-changed"
]
"""What a PodEvent says: a pod came, left or restarted; the API went away or came back; the
InferencePool's selector or port changed."""


@dataclass(frozen=True)
class Pod:
    """What llmtop reads of one pod object."""

    namespace: str
    name: str
    node: str | None
    """spec.nodeName; None while the pod is not scheduled."""
    ip: str | None
    """status.podIP; None before the pod has one."""
    phase: str
    """status.phase: Pending, Running, Succeeded, Failed, Unknown."""
    ready: bool
    """Its Ready condition is True."""
    deleting: bool
    """metadata.deletionTimestamp is set: it is shutting down."""
    port: int
    """The metrics port (annotation, a named container port, else the engine's default)."""
    restarts: int
    """The sum of its containers' restartCount."""
    last_reason: str | None
    """The reason of the most recent container's last terminated state (OOMKilled, Error, ...)."""
    api_port: int = DEFAULT_ENGINE_PORT
    """The port its OpenAI API answers on, for the gateway: a container port named `http`,
    else the metrics port (vLLM serves both on one)."""

    @property
    def key(self) -> str:
        """namespace/name: unique in a cluster."""
        return f"{self.namespace}/{self.name}"

    @property
    def serving(self) -> bool:
        """Running, Ready and not being deleted: a pod to scrape."""
        return self.phase == "Running" and self.ready and not self.deleting


def read_pod(
    obj: Mapping[str, Any], default_port: int = DEFAULT_ENGINE_PORT, *, port: int | None = None
) -> Pod:
    """The Pod of a pod object; ValueError when it has no name or namespace. `port` (an
    InferencePool's target port) is both its metrics and its API port."""
    meta = _map(obj.get("metadata"))
    spec = _map(obj.get("spec"))
    status = _map(obj.get("status"))
    name, namespace = meta.get("name"), meta.get("namespace")
    if not isinstance(name, str) or not isinstance(namespace, str) or not name or not namespace:
        raise ValueError("a pod object without metadata.name or metadata.namespace")
    conditions = [_map(c) for c in _list(status.get("conditions"))]
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    restarts, last_reason = _restarts(_list(status.get("containerStatuses")))
    node, ip = spec.get("nodeName"), status.get("podIP")
    metrics = port if port is not None else metrics_port(obj, default_port)
    api = port if port is not None else _named_ports(obj).get("http", metrics)
    return Pod(
        namespace=namespace,
        name=name,
        node=node if isinstance(node, str) and node else None,
        ip=ip if isinstance(ip, str) and ip else None,
        phase=str(status.get("phase") or "Unknown"),
        ready=ready,
        deleting=meta.get("deletionTimestamp") is not None,
        port=metrics,
        restarts=restarts,
        last_reason=last_reason,
        api_port=api,
    )


def metrics_port(obj: Mapping[str, Any], default_port: int = DEFAULT_ENGINE_PORT) -> int:
    """The `prometheus.io/port` annotation, else a container port named `metrics`, else one
    named `http`, else `default_port`; an annotation that is not a port is passed over."""
    annotations = _map(_map(obj.get("metadata")).get("annotations"))
    port = _port(annotations.get(PORT_ANNOTATION))
    if port is not None:
        return port
    named = _named_ports(obj)
    for label in PORT_NAMES:
        if label in named:
            return named[label]
    return default_port


def _named_ports(obj: Mapping[str, Any]) -> dict[str, int]:
    """The pod's container ports by name (the first of a name)."""
    named: dict[str, int] = {}
    for container in _list(_map(obj.get("spec")).get("containers")):
        for p in _list(_map(container).get("ports")):
            number = _port(_map(p).get("containerPort"))
            label = _map(p).get("name")
            if number is not None and isinstance(label, str):
                named.setdefault(label, number)
    return named


def pod_target(pod: Pod, *, api_server: str | None, name: str | None = None) -> Target:
    """The pod as a fleet target: its base URL through the API server's pod proxy
    (`/api/v1/namespaces/NS/pods/NAME:PORT/proxy`, whose /metrics the scraper reads) when
    `api_server` is given (from outside the cluster), else its IP (from inside)."""
    url = pod_url(pod, pod.port, api_server=api_server)
    if url is None:
        raise ValueError(f"pod {pod.key} has no IP yet")
    return Target(url, name or pod.name)


def pod_url(pod: Pod, port: int, *, api_server: str | None) -> str | None:
    """`pod`'s base URL at `port`: through the pod proxy of `api_server` (the API server, or
    `kubectl proxy`) when given, `.../api/v1/namespaces/NS/pods/NAME:PORT/proxy`; else at its
    IP, `http://IP:PORT`; None when it has no IP yet."""
    if api_server is not None:
        ns, name = quote(pod.namespace, safe=""), quote(pod.name, safe="")
        return f"{api_server.rstrip('/')}/api/v1/namespaces/{ns}/pods/{name}:{port}/proxy"
    if pod.ip is None:
        return None
    host = f"[{pod.ip}]" if ":" in pod.ip else pod.ip
    return f"http://{host}:{port}"


def serving_targets(
    pods: Mapping[str, Pod], *, api_server: str | None, qualify: bool
) -> tuple[Target, ...]:
    """The serving pods as targets, by key; named by pod, `namespace/pod` when `qualify` (pods
    of several namespaces)."""
    out: list[Target] = []
    for key in sorted(pods):
        pod = pods[key]
        if not pod.serving or (api_server is None and pod.ip is None):
            continue
        out.append(pod_target(pod, api_server=api_server, name=key if qualify else pod.name))
    return tuple(out)


def upstream_urls(pods: Mapping[str, Pod], *, kubectl_proxy: str | None) -> tuple[str, ...]:
    """The gateway's upstreams: each serving pod's API base URL, by key. At its IP
    (`http://IP:PORT`: inside the cluster, or wherever the pod network is routed), or through
    `kubectl proxy` at `kubectl_proxy` (`.../pods/NAME:PORT/proxy`), which adds the
    credentials itself: the way to try the gateway from a laptop, not a production path."""
    serving = (pods[key] for key in sorted(pods) if pods[key].serving)
    urls = (pod_url(pod, pod.api_port, api_server=kubectl_proxy) for pod in serving)
    return tuple(url for url in urls if url is not None)


@dataclass(frozen=True)
class PoolSpec:
    """What llmtop reads of an InferencePool (inference.networking.k8s.io/v1)."""

    selector: str
    """spec.selector.matchLabels as a label selector (`app=vllm,tier=prod`), keys sorted."""
    port: int
    """spec.targetPorts[0].number: where its pods serve (the API and /metrics)."""
    version: str
    """metadata.resourceVersion, where a watch of it starts."""


def read_pool(obj: Mapping[str, Any]) -> PoolSpec:
    """The PoolSpec of an InferencePool object; ValueError, in words, when it has no labels to
    match (an empty selector would take every pod of the namespace) or no target port."""
    meta, spec = _map(obj.get("metadata")), _map(obj.get("spec"))
    name = meta.get("name") or "?"
    labels = _map(_map(spec.get("selector")).get("matchLabels"))
    pairs = [(k, v) for k, v in labels.items() if isinstance(k, str) and isinstance(v, str)]
    if not pairs:
        raise ValueError(f"InferencePool {name} has no spec.selector.matchLabels")
    ports = [_port(_map(p).get("number")) for p in _list(spec.get("targetPorts"))]
    port = next((p for p in ports if p is not None), None)
    if port is None:
        raise ValueError(f"InferencePool {name} has no spec.targetPorts[].number")
    selector = ",".join(f"{k}={v}" for k, v in sorted(pairs))
    return PoolSpec(selector, port, str(meta.get("resourceVersion") or ""))


@dataclass(frozen=True)
class PodEvent:
    """A pod that appeared, left or restarted, when llmtop saw it."""

    time: float
    kind: PodChange
    pod: str
    """namespace/name; empty for api-away and api-back."""
    summary: str


def pod_change(before: Pod | None, after: Pod | None, time: float) -> PodEvent | None:
    """The event between two looks at one pod (None: absent); None when nothing that the
    timeline shows changed."""
    if before is None and after is not None:
        where = f" on {after.node}" if after.node else ""
        return PodEvent(time, "pod-added", after.key, f"pod {after.key} appeared{where}")
    if before is not None and after is None:
        return PodEvent(time, "pod-deleted", before.key, f"pod {before.key} left")
    if before is not None and after is not None and after.restarts > before.restarts:
        n = after.restarts - before.restarts
        why = f" ({after.last_reason})" if after.last_reason else ""
        where = f" on {after.node}" if after.node else ""
        times = "" if n == 1 else f" {n} times"
        total = f"{after.restarts} restart{'s' * (after.restarts != 1)} in all"
        summary = f"pod {after.key} restarted{times}{why}{where}; {total}"
        return PodEvent(time, "pod-restarted", after.key, summary)
    return None


def pod_changes(before: Mapping[str, Pod], after: Mapping[str, Pod], time: float) -> list[PodEvent]:
    """Every event between two looks at the whole set (a relist), by pod key."""
    out = []
    for key in sorted(before.keys() | after.keys()):
        event = pod_change(before.get(key), after.get(key), time)
        if event is not None:
            out.append(event)
    return out


def _restarts(statuses: list[Any]) -> tuple[int, str | None]:
    """The summed restartCount and the most recent last-terminated reason."""
    total, reason, latest = 0, None, ""
    for raw in statuses:
        status = _map(raw)
        count = status.get("restartCount")
        if isinstance(count, int) and not isinstance(count, bool):
            total += count
        terminated = _map(_map(status.get("lastState")).get("terminated"))
        why = terminated.get("reason")
        if isinstance(why, str) and why:
            finished = str(terminated.get("finishedAt") or "")
            if reason is None or finished >= latest:  # RFC 3339 in UTC sorts as text
                reason, latest = why, finished
    return total, reason


def _port(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    try:
        port = int(value)
    except (TypeError, ValueError):
        return None
    return port if 0 < port < 65536 else None


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
