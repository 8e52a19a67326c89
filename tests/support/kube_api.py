"""A Kubernetes API emulator for pods, on 127.0.0.1 in a thread of its own: list and watch
(resourceVersion, bookmarks left out, 410 Gone for a compacted version, label selectors of
`k=v,...`), the pod proxy (`/api/v1/namespaces/NS/pods/NAME:PORT/proxy/...`) forwarding to a
real server per pod, a bearer token (401 without it), RBAC refusals (403 per verb), HTTPS
with a trustme CA or plain HTTP (as `kubectl proxy` serves it). It counts every request.

Not kmock (PyPI): its list answers `resourceVersion: "..."`, its watch replays every object as
ADDED whatever version is asked and knows no label selector, 410 or TLS: what these tests are
about.
"""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import trustme
from aiohttp import web

Obj = dict[str, Any]

LEFTOVER_SOCKETS = pytest.mark.filterwarnings(
    # a watch or proxy connection the emulator cuts (its transport aborted, or the client process
    # gone) may leave its socket to the garbage collector, which can report it during any later
    # test of the module: the emulator's, not the code under test's
    "ignore:Exception ignored in.*(_SelectorTransport|socket.socket)"
    ":pytest.PytestUnraisableExceptionWarning"
)
"""The mark of every module that runs the emulator."""


@dataclass
class Seen:
    """One request the emulator answered."""

    kind: str
    """list, watch or proxy."""
    path: str
    query: dict[str, str]
    authorization: str | None


@dataclass
class _Watch:
    queue: asyncio.Queue[tuple[int, str, Obj] | None]
    request: web.Request


def pod(
    name: str,
    *,
    namespace: str = "llm",
    labels: dict[str, str] | None = None,
    ready: bool = True,
    phase: str = "Running",
    ip: str = "10.0.0.1",
    node: str = "node-a",
    restarts: int = 0,
    last_reason: str | None = None,
    ports: list[dict[str, Any]] | None = None,
    annotations: dict[str, str] | None = None,
) -> Obj:
    """A pod object as the API serves it (the fields llmtop reads, and a few more)."""
    status: Obj = {
        "phase": phase,
        "podIP": ip,
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        "containerStatuses": [
            {"name": "vllm", "ready": ready, "restartCount": restarts, "lastState": {}}
        ],
    }
    if last_reason is not None:
        status["containerStatuses"][0]["lastState"] = {
            "terminated": {"reason": last_reason, "exitCode": 137,
                           "finishedAt": "2026-12-07T10:00:00Z"}
        }  # fmt: skip
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{namespace}-{name}",
            "labels": labels if labels is not None else {"app": "vllm"},
            "annotations": annotations or {},
        },
        "spec": {
            "nodeName": node,
            "containers": [{"name": "vllm", "image": "vllm/vllm-openai", "ports": ports or []}],
        },
        "status": status,
    }


def pool(
    name: str,
    labels: dict[str, str],
    *,
    port: int = 8000,
    namespace: str = "llm",
) -> Obj:
    """An InferencePool as GAIE's v1 API serves it (api/v1/inferencepool_types.go): its
    selector's matchLabels, one target port, the endpoint picker it names."""
    return {
        "apiVersion": "inference.networking.k8s.io/v1",
        "kind": "InferencePool",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-pool-{name}"},
        "spec": {
            "selector": {"matchLabels": labels},
            "targetPorts": [{"number": port}],
            "endpointPickerRef": {"name": f"{name}-epp", "portNumber": 9002},
        },
    }


class KubeEmulator:
    """Start with `start()`; change pods with `put` / `delete` (thread-safe); `stop()`."""

    def __init__(
        self,
        *,
        tls: Any = None,
        token: str | None = None,
        metrics_body: bytes | None = None,
    ) -> None:
        self.tls = tls
        """A trustme.CA: serve HTTPS with a certificate it issued for 127.0.0.1."""
        self.token = token
        """The bearer token required (None: none, as kubectl proxy)."""
        self.metrics_body = metrics_body
        """What a pod without a backend answers at /metrics through the proxy."""
        self.backends: dict[str, str] = {}
        """namespace/name -> the base URL its proxy forwards to (a real `llmtop sim`)."""
        self.forbid: set[str] = set()
        """Verbs refused with 403: list, watch, proxy."""
        self.pool_crd = True
        """The cluster serves InferencePools (False: 404 for their paths, the CRD missing)."""
        self.gone_as_status = False
        """A too-old watch gets HTTP 410 (True) or an ERROR event of code 410 (as the API does)."""
        self.seen: list[Seen] = []
        self._pods: dict[str, Obj] = {}
        self._pools: dict[str, Obj] = {}
        self._history: list[tuple[int, str, Obj]] = []
        self._version = 100
        self._compacted = 0
        self._watches: list[_Watch] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self._client: aiohttp.ClientSession | None = None
        self.port = 0

    # -- the test's side ---------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def count(self, kind: str) -> int:
        return sum(1 for s in self.seen if s.kind == kind)

    def put(self, obj: Obj, *, publish: bool = True) -> None:
        """Add or change a pod; `publish=False`: no watch hears of it (it happened while the
        watch was away, its history compacted: `drop_watches(compact=True)`)."""
        self._call(lambda: self._put(obj, publish))

    def delete(self, namespace: str, name: str, *, publish: bool = True) -> None:
        self._call(lambda: self._delete(f"{namespace}/{name}", publish))

    def delete_pool(self, namespace: str, name: str) -> None:
        self._call(lambda: self._delete(f"{namespace}/{name}", True, self._pools))

    def drop_watches(self, *, compact: bool = False) -> None:
        """Cut every open watch's connection; `compact`: versions before now are gone (410)."""
        self._call(lambda: self._drop(compact))

    def open_watches(self) -> int:
        return int(self._call(lambda: len(self._watches)))

    def start(self) -> KubeEmulator:
        ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, args=(ready,), daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("the Kubernetes API emulator did not start")
        return self

    def stop(self) -> None:
        if self._loop is None or self._thread is None:
            return
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop = None

    def write_kubeconfig(
        self,
        path: Path,
        *,
        namespace: str = "llm",
        context: str = "emulated",
        token: str | None = None,
        extra_context: str | None = None,
        user: Obj | None = None,
    ) -> Path:
        """A kubeconfig whose current context reaches this API with the CA and the token (or
        `user`: an exec plugin, say)."""
        cluster: Obj = {"server": self.url}
        if self.tls is not None:
            pem = self.tls.cert_pem.bytes()
            cluster["certificate-authority-data"] = base64.b64encode(pem).decode()
        if user is None:
            user = {"token": token or self.token} if token or self.token else {}
        contexts = [
            {"name": context, "context": {"cluster": "emu", "user": "emu", "namespace": namespace}}
        ]
        if extra_context:
            contexts.append({"name": extra_context, "context": {"cluster": "emu", "user": "emu"}})
        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "emu", "cluster": cluster}],
            "users": [{"name": "emu", "user": user}],
            "contexts": contexts,
            "current-context": context,
        }
        path.write_text(json.dumps(doc), encoding="utf-8")  # JSON is YAML
        return path

    # -- the server's side -------------------------------------------------------------------

    def _call(self, fn: Callable[[], Any]) -> Any:
        assert self._loop is not None

        async def run() -> Any:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(10)

    def _serve(self, ready: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        app = web.Application()
        app.router.add_get("/api/v1/pods", self._pods_route)
        app.router.add_get("/api/v1/namespaces/{ns}/pods", self._pods_route)
        pools = "/apis/inference.networking.k8s.io/v1/namespaces/{ns}/inferencepools"
        app.router.add_get(pools, self._pools_route)
        app.router.add_get(pools + "/{name}", self._pool_route)
        app.router.add_route(
            "*", r"/api/v1/namespaces/{ns}/pods/{name}:{port:\d+}/proxy/{tail:.*}", self._proxy
        )
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.5)
        loop.run_until_complete(self._runner.setup())
        ctx = None
        if self.tls is not None:
            ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            self.tls.issue_cert("127.0.0.1", "localhost").configure_cert(ctx)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        loop.run_until_complete(web.SockSite(self._runner, sock, ssl_context=ctx).start())
        ready.set()
        loop.run_forever()
        loop.close()

    async def _shutdown(self) -> None:
        self._drop(compact=False)
        if self._client is not None:
            await self._client.close()
        if self._runner is not None:
            await self._runner.cleanup()

    def _put(self, obj: Obj, publish: bool) -> None:
        meta = obj["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        store = self._pools if obj.get("kind") == "InferencePool" else self._pods
        kind = "MODIFIED" if key in store else "ADDED"
        self._version += 1
        obj = json.loads(json.dumps(obj))
        obj["metadata"]["resourceVersion"] = str(self._version)
        store[key] = obj
        if publish:
            self._publish(kind, obj)

    def _delete(self, key: str, publish: bool, store: dict[str, Obj] | None = None) -> None:
        obj = (self._pods if store is None else store).pop(key)
        self._version += 1
        obj["metadata"]["resourceVersion"] = str(self._version)
        if publish:
            self._publish("DELETED", obj)

    def _publish(self, kind: str, obj: Obj) -> None:
        entry = (self._version, kind, obj)
        self._history.append(entry)
        for w in self._watches:
            w.queue.put_nowait(entry)

    def _drop(self, compact: bool) -> None:
        if compact:
            self._compacted = self._version
        for w in self._watches:
            w.queue.put_nowait(None)

    def _refusal(
        self, request: web.Request, verb: str, resource: str = "pods", group: str = ""
    ) -> web.Response | None:
        """401 without the token; 403 for a verb in `forbid` (`list`, `watch`, `proxy`; for
        InferencePools `get inferencepools`, `watch inferencepools`)."""
        auth = request.headers.get("Authorization")
        if self.token is not None and auth != f"Bearer {self.token}":
            return _status(401, "Unauthorized", "Unauthorized")
        named = verb if resource == "pods" else f"{verb} {resource}"
        if named in self.forbid:
            ns = request.match_info.get("ns")
            resource = "pods/proxy" if verb == "proxy" else resource
            where = f' in the namespace "{ns}"' if ns else " at the cluster scope"
            message = (
                f'{resource} is forbidden: User "system:serviceaccount:llm:console" cannot '
                f'{"get" if verb == "proxy" else verb} resource "{resource}" in API group'
                f' "{group}"{where}'
            )
            return _status(403, "Forbidden", message)
        return None

    async def _pool_route(self, request: web.Request) -> web.StreamResponse:
        """GET one InferencePool."""
        self.seen.append(
            Seen(
                "pool-get", request.path, dict(request.query), request.headers.get("Authorization")
            )
        )
        refusal = self._refusal(request, "get", "inferencepools", _POOL_GROUP)
        if refusal is not None:
            return refusal
        if not self.pool_crd:
            return _status(404, "NotFound", "the server could not find the requested resource")
        name = request.match_info["name"]
        obj = self._pools.get(f"{request.match_info['ns']}/{name}")
        if obj is None:
            message = f'inferencepools.{_POOL_GROUP} "{name}" not found'
            return _status(404, "NotFound", message)
        return web.json_response(obj)

    async def _pools_route(self, request: web.Request) -> web.StreamResponse:
        """List or watch InferencePools (a `metadata.name=` field selector)."""
        query = dict(request.query)
        watching = query.get("watch") in ("true", "1", "True")
        kind = "pool-watch" if watching else "pool-list"
        self.seen.append(Seen(kind, request.path, query, request.headers.get("Authorization")))
        verb = "watch" if watching else "list"
        refusal = self._refusal(request, verb, "inferencepools", _POOL_GROUP)
        if refusal is not None:
            return refusal
        if not self.pool_crd:
            return _status(404, "NotFound", "the server could not find the requested resource")
        ns = request.match_info["ns"]
        field = query.get("fieldSelector", "")
        name = field.split("=", 1)[1] if field.startswith("metadata.name=") else None
        if not watching:
            items = [
                o for k, o in self._pools.items()
                if k.startswith(f"{ns}/") and (name is None or o["metadata"]["name"] == name)
            ]  # fmt: skip
            return web.json_response(
                {"kind": "InferencePoolList", "apiVersion": f"{_POOL_GROUP}/v1",
                 "metadata": {"resourceVersion": str(self._version)}, "items": items}
            )  # fmt: skip
        since = int(query.get("resourceVersion") or 0)
        return await self._stream(
            request, ns, {}, since, float(query["timeoutSeconds"]), "InferencePool", name
        )

    async def _pods_route(self, request: web.Request) -> web.StreamResponse:
        query = dict(request.query)
        watching = query.get("watch") in ("true", "1", "True")
        kind = "watch" if watching else "list"
        self.seen.append(Seen(kind, request.path, query, request.headers.get("Authorization")))
        refusal = self._refusal(request, kind)
        if refusal is not None:
            return refusal
        ns = request.match_info.get("ns")
        selector = _selector(query.get("labelSelector", ""))
        if not watching:
            items = [p for p in self._pods.values() if _matches(p, ns, selector)]
            return web.json_response(
                {"kind": "PodList", "apiVersion": "v1",
                 "metadata": {"resourceVersion": str(self._version)}, "items": items}
            )  # fmt: skip
        since = int(query.get("resourceVersion") or 0)
        if since < self._compacted:
            message = f"too old resource version: {since} ({self._compacted})"
            if self.gone_as_status:
                return _status(410, "Expired", message)
            resp = web.StreamResponse(headers={"Content-Type": "application/json"})
            await resp.prepare(request)
            error = {
                "type": "ERROR",
                "object": {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "status": "Failure",
                    "message": message,
                    "reason": "Expired",
                    "code": 410,
                },
            }
            await resp.write(json.dumps(error).encode() + b"\n")  # fmt: skip
            return resp
        return await self._stream(request, ns, selector, since, float(query["timeoutSeconds"]))

    async def _stream(
        self,
        request: web.Request,
        ns: str | None,
        selector: dict[str, str],
        since: int,
        timeout_s: float,
        kind: str = "Pod",
        name: str | None = None,
    ) -> web.StreamResponse:
        watch = _Watch(asyncio.Queue(), request)
        self._watches.append(watch)
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        await resp.prepare(request)
        try:
            for past in [e for e in self._history if e[0] > since]:
                watch.queue.put_nowait(past)
            sent = since
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout_s
            while True:
                try:
                    entry = await asyncio.wait_for(watch.queue.get(), deadline - loop.time())
                except TimeoutError:
                    return resp  # the server's timeoutSeconds: a clean end
                if entry is None:  # drop: cut the connection mid-stream
                    if request.transport is not None:
                        request.transport.abort()
                    return resp
                version, change, obj = entry
                if version <= sent or not _matches(obj, ns, selector, kind, name):
                    continue
                sent = version
                await resp.write(json.dumps({"type": change, "object": obj}).encode() + b"\n")
        except (ConnectionResetError, asyncio.CancelledError):
            return resp
        finally:
            self._watches.remove(watch)

    async def _proxy(self, request: web.Request) -> web.StreamResponse:
        self.seen.append(
            Seen("proxy", request.path, dict(request.query), request.headers.get("Authorization"))
        )
        refusal = self._refusal(request, "proxy")
        if refusal is not None:
            return refusal
        key = f"{request.match_info['ns']}/{request.match_info['name']}"
        if key not in self._pods:
            return _status(404, "NotFound", f'pods "{request.match_info["name"]}" not found')
        tail = request.match_info["tail"]
        backend = self.backends.get(key)
        if backend is None:
            if self.metrics_body is None or tail.rstrip("/") != "metrics":
                return _status(503, "ServiceUnavailable", "no endpoints available")
            return web.Response(body=self.metrics_body, content_type="text/plain")
        if self._client is None:
            self._client = aiohttp.ClientSession(auto_decompress=False)
        url = f"{backend.rstrip('/')}/{tail}"
        headers = {k: v for k, v in request.headers.items() if k.lower() in _PASSED}
        body = await request.read()
        async with self._client.request(
            request.method, url, params=request.query, data=body or None, headers=headers
        ) as got:  # streamed back as it comes, as the API server's proxy does (SSE included)
            resp = web.StreamResponse(status=got.status)
            resp.content_type = got.content_type or "text/plain"
            await resp.prepare(request)
            async for chunk in got.content.iter_any():
                await resp.write(chunk)
            await resp.write_eof()
            return resp


_POOL_GROUP = "inference.networking.k8s.io"
_PASSED = {"content-type", "accept"}
"""Request headers the proxy passes on (Authorization is the API server's own)."""


def https_api(tmp_path: Path) -> Iterator[tuple[KubeEmulator, Path]]:
    """An API server as a cluster serves it (HTTPS with its own CA, a bearer token) and a
    kubeconfig for it; stopped after. A fixture's body: `yield from https_api(tmp_path)`."""
    emu = KubeEmulator(tls=trustme.CA(), token="s3cret-token").start()
    yield emu, emu.write_kubeconfig(tmp_path / "kubeconfig")
    emu.stop()


async def until(check: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    """Wait for `check()` (a watch runs in the background), failing with `what`."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def in_cluster(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, ca: trustme.CA, port: int) -> None:
    """As in a pod: a service account (token `sa-token`, namespace `llm`, `ca`) at
    tmp_path/serviceaccount, the API at 127.0.0.1:`port`, and no kubeconfig."""
    from llmtop.sources.kube import credentials

    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text("sa-token", encoding="utf-8")
    (account / "namespace").write_text("llm", encoding="utf-8")
    (account / "ca.crt").write_bytes(ca.cert_pem.bytes())
    monkeypatch.setattr(credentials, "SA_DIR", account)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(port))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.kube/config


def _status(code: int, reason: str, message: str) -> web.Response:
    return web.json_response(
        {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
         "message": message, "reason": reason, "code": code},
        status=code,
    )  # fmt: skip


def _selector(text: str) -> dict[str, str]:
    out = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, _, value = part.partition("=")
        out[name.strip()] = value.lstrip("=").strip()
    return out


def _matches(
    obj: Obj, ns: str | None, selector: dict[str, str], kind: str = "Pod", name: str | None = None
) -> bool:
    meta = obj["metadata"]
    if obj.get("kind", "Pod") != kind or (name is not None and meta["name"] != name):
        return False
    if ns is not None and meta["namespace"] != ns:
        return False
    labels = meta.get("labels") or {}
    return all(labels.get(k) == v for k, v in selector.items())
