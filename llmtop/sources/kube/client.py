"""The Kubernetes client (kubernetes_asyncio) behind one `KubeApi`: pods and an InferencePool
listed and watched as the API's own JSON, every failure a `KubeError` in words. Only this module
and `credentials.py` (which API server, as whom) import the client, so an upstream change breaks
these two files only.

Why kubernetes_asyncio (not lightkube): it rides on aiohttp, the fleet's HTTP stack already
(lightkube 1.x brings httpx2, a third stack); it is the Kubernetes project's own generated client,
released with every Kubernetes minor; its exec plugins honour `expirationTimestamp` and its
in-cluster loader re-reads the rotated service-account token. What it lacks (a token refreshed on
a 401, a watch that resumes and relists) is done here and in `discovery.py`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio.config.config_exception import ConfigException

from llmtop.errors import KubeError


class Refresh(Protocol):
    """An exec plugin's credential refresh (credentials.ExecRefresh): `force` runs it again."""

    force: bool


logging.getLogger("kubernetes_asyncio").addHandler(logging.NullHandler())
"""The client logs what it raises (an exec plugin's failure) to stderr through logging's last
resort; what it raises becomes llmtop's one line, so that log goes nowhere."""

NEEDS = "the console needs pods get/list/watch and pods/proxy get (docs/kubernetes.md, Discovery)"
POOL_NEEDS = "with --inference-pool also inferencepools get/list/watch (docs/kubernetes.md, RBAC)"
POOL_GROUP, POOL_VERSION, POOLS = "inference.networking.k8s.io", "v1", "inferencepools"
"""GAIE's InferencePool, as read here: api/v1/inferencepool_types.go of
kubernetes-sigs/gateway-api-inference-extension (v1.0 and later): spec.selector.matchLabels,
spec.targetPorts[0].number."""


@dataclass(frozen=True)
class PodList:
    """One list's pod objects and the collection's resourceVersion, where a watch starts."""

    items: list[dict[str, Any]]
    resource_version: str


class KubeApi:
    """An authenticated connection to one API server; `credentials.connect` builds it."""

    def __init__(
        self,
        api: Any,
        configuration: Any,
        *,
        context: str | None,
        namespace: str,
        in_cluster: bool,
        refresh: Refresh | None = None,
    ) -> None:
        self._api = api
        self._core: Any = k8s_client.CoreV1Api(api)
        self._custom: Any = k8s_client.CustomObjectsApi(api)
        self._cfg = configuration
        self._refresh = refresh
        self.server: str = str(configuration.host).rstrip("/")
        """The API server's base URL (https://host:port, or kubectl proxy's http://...)."""
        self.context = context
        """The kubeconfig context used; None in the cluster."""
        self.namespace = namespace
        """The context's namespace (the service account's in the cluster; else `default`)."""
        self.in_cluster = in_cluster
        """True when running in a pod with its service account: engines are read by pod IP."""
        self.ssl: ssl.SSLContext | None = _ssl_context(configuration) if self.secure else None
        """The TLS context of the API server (its CA, the client certificate), for the
        scrapes through its pod proxy."""

    @property
    def secure(self) -> bool:
        return self.server.startswith("https:")

    @property
    def where(self) -> str:
        """The API server and the context, for error lines."""
        return f"{self.server} (context {self.context})" if self.context else self.server

    async def auth_headers(self) -> dict[str, str]:
        """The Authorization header now, refreshed when an exec credential expired or a 401
        said so; empty without a token (a client certificate, kubectl proxy)."""
        try:
            token = await self._cfg.get_api_key_with_prefix("BearerToken")
        except (ConfigException, OSError, RuntimeError) as e:
            raise KubeError(f"credentials of {self.where}: {one_line(str(e))}") from None
        return {"Authorization": str(token)} if token else {}

    def token_refused(self) -> None:
        """A 401: run the exec plugin again before the next request (client-go does the same)."""
        if self._refresh is not None:
            self._refresh.force = True

    async def list_pods(self, namespace: str | None, selector: str) -> PodList:
        """One list of the pods matching `selector` in `namespace` (None: every namespace)."""
        call, args = self._pods_call(namespace)
        resp = await self._request(
            "list", namespace, call, *args, label_selector=selector, _request_timeout=30
        )
        try:
            body = await resp.read()
        except (aiohttp.ClientError, TimeoutError) as e:
            raise KubeError(f"listing pods at {self.where}: {one_line(str(e))}") from None
        finally:
            resp.release()
        try:
            doc = json.loads(body)
            items = doc.get("items") or []
            version = str(doc["metadata"]["resourceVersion"])
        except (ValueError, KeyError, TypeError, AttributeError):
            raise KubeError(f"{self.where} answered a pod list llmtop cannot read") from None
        return PodList([x for x in items if isinstance(x, dict)], version)

    async def watch_pods(
        self, namespace: str | None, selector: str, resource_version: str, *, timeout_s: int
    ) -> WatchStream:
        """A watch opened after `resource_version` (the API answered 200); KubeError as
        `list_pods`, with status 410 when the version is too old to resume from."""
        call, args = self._pods_call(namespace)
        resp = await self._request(
            "watch",
            namespace,
            call,
            *args,
            label_selector=selector,
            **_watch_query(resource_version, timeout_s),
        )
        return WatchStream(resp, self.where)

    async def get_pool(self, namespace: str, name: str) -> dict[str, Any]:
        """The InferencePool `name` (its JSON); KubeError in words, status 404 when there is no
        such pool or the cluster serves no InferencePools at all."""
        resp = await self._request(
            "get",
            namespace,
            self._custom.get_namespaced_custom_object,
            POOL_GROUP,
            POOL_VERSION,
            namespace,
            POOLS,
            name,
            _request_timeout=30,
            resource=POOLS,
            name=name,
        )
        try:
            doc = json.loads(await resp.read())
        except (aiohttp.ClientError, TimeoutError, ValueError) as e:
            raise KubeError(f"reading InferencePool {name} at {self.where}: {e}") from None
        finally:
            resp.release()
        if not isinstance(doc, dict):
            raise KubeError(f"{self.where} answered an InferencePool llmtop cannot read")
        return doc

    async def watch_pool(
        self, namespace: str, name: str, resource_version: str, *, timeout_s: int
    ) -> WatchStream:
        """A watch of the one InferencePool `name` after `resource_version` (a field selector
        on its name: the list and watch verbs, not a request per look)."""
        resp = await self._request(
            "watch",
            namespace,
            self._custom.list_namespaced_custom_object,
            POOL_GROUP,
            POOL_VERSION,
            namespace,
            POOLS,
            field_selector=f"metadata.name={name}",
            **_watch_query(resource_version, timeout_s),
            resource=POOLS,
            name=name,
        )
        return WatchStream(resp, self.where, what=f"InferencePool {name}")

    def _pods_call(self, namespace: str | None) -> tuple[Any, tuple[str, ...]]:
        if namespace is None:
            return self._core.list_pod_for_all_namespaces, ()
        return self._core.list_namespaced_pod, (namespace,)

    async def _request(
        self,
        verb: str,
        namespace: str | None,
        call: Any,
        *args: Any,
        resource: str = "pods",
        name: str | None = None,
        **kwargs: Any,
    ) -> aiohttp.ClientResponse:
        """The raw answer of one call (the body still to read), or KubeError in words."""
        try:
            resp: aiohttp.ClientResponse = await call(*args, _preload_content=False, **kwargs)
        except aiohttp.ClientConnectorCertificateError as e:
            reason = getattr(e.certificate_error, "reason", None) or e.certificate_error
            raise KubeError(
                f"cannot reach the Kubernetes API at {self.where}: TLS: {reason}"
            ) from None
        except aiohttp.ClientConnectorError as e:
            os_error = e.os_error
            refused = isinstance(os_error, ConnectionRefusedError)
            why = "connection refused" if refused else (os_error.strerror or str(os_error))
            raise KubeError(f"cannot reach the Kubernetes API at {self.where}: {why}") from None
        except (TimeoutError, asyncio.TimeoutError):
            raise KubeError(f"no answer from the Kubernetes API at {self.where}") from None
        except aiohttp.ClientError as e:
            raise KubeError(
                f"the Kubernetes API at {self.where}: {type(e).__name__}: {one_line(str(e))}"
            ) from None
        except (ConfigException, OSError, RuntimeError) as e:  # the exec plugin, a cert file
            raise KubeError(f"credentials of {self.where}: {one_line(str(e))}") from None
        if resp.status < 300:
            return resp
        try:
            body = await resp.read()
        except aiohttp.ClientError:
            body = b""
        finally:
            resp.release()
        raise self._refusal(verb, namespace, resp.status, body, resource, name)

    def _refusal(
        self,
        verb: str,
        namespace: str | None,
        status: int,
        body: bytes,
        resource: str = "pods",
        name: str | None = None,
    ) -> KubeError:
        """The API's refusal in words, naming what to fix."""
        message = _status_message(body)
        scope = f"in namespace {namespace}" if namespace else "in all namespaces"
        pool = resource == POOLS
        needs = f"{NEEDS}; {POOL_NEEDS}" if pool else NEEDS
        if pool and status == 404:
            if "could not find the requested resource" in message:
                return KubeError(
                    f"the Kubernetes API at {self.where} serves no {POOL_GROUP}/{POOL_VERSION}"
                    " InferencePool: is the Gateway API Inference Extension (v1.0 or later)"
                    " installed?",
                    status=status,
                )
            return KubeError(
                f"no InferencePool {name} {scope} (kubectl -n {namespace} get inferencepools)",
                status=status,
            )
        if status == 401:
            self.token_refused()
            return KubeError(
                f"the Kubernetes API at {self.where} refused the credentials (401 Unauthorized):"
                " the token may have expired; log in again or refresh the kubeconfig",
                status=status,
            )
        if status == 403:
            why = f" ({message})" if message else ""
            return KubeError(
                f"forbidden: cannot {verb} {resource} {scope}{why}: {needs}", status=status
            )
        if status == 410:
            return KubeError(
                f"{verb} {resource}: 410 Gone (resourceVersion too old)", status=status
            )
        why = f": {message}" if message else ""
        return KubeError(
            f"the Kubernetes API at {self.where} answered {status} to {verb} {resource}"
            f" {scope}{why}",
            status=status,
        )

    async def aclose(self) -> None:
        """Close the client's connections."""
        await self._api.close()


class WatchStream:
    """An open watch: iterate for its events (ADDED, MODIFIED, DELETED, BOOKMARK) as the API's
    JSON objects, until the server ends it (after about its timeout). KubeError when the
    connection drops (status None), for an ERROR event (410: the version is too old). `close`
    it when done."""

    def __init__(self, resp: aiohttp.ClientResponse, where: str, what: str = "pods") -> None:
        self._resp = resp
        self._where = where
        self._what = what

    def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        return self._events()

    async def _events(self) -> AsyncIterator[dict[str, Any]]:
        while True:
            try:
                line = await self._resp.content.readline()
            except (aiohttp.ClientError, TimeoutError, asyncio.TimeoutError, ValueError) as e:
                why = one_line(str(e)) or type(e).__name__
                raise KubeError(
                    f"the watch of {self._what} at {self._where} dropped: {why}"
                ) from None
            if not line:
                return  # the server ended the watch
            if not line.strip():
                continue
            try:
                event = json.loads(line)
            except ValueError:
                raise KubeError(f"{self._where} sent a watch event llmtop cannot read") from None
            if not isinstance(event, dict):
                continue
            if event.get("type") == "ERROR":
                raise _watch_error(event.get("object"), self._what)
            yield event

    def close(self) -> None:
        """Close the connection (the server sees the watch end)."""
        self._resp.close()


def _ssl_context(cfg: Any) -> ssl.SSLContext:
    """The client's TLS settings as a context for aiohttp: the cluster's CA, the client
    certificate, insecure-skip-tls-verify."""
    ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert)
    if cfg.cert_file:
        ctx.load_cert_chain(cfg.cert_file, keyfile=cfg.key_file)
    if not cfg.verify_ssl:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def _watch_query(resource_version: str, timeout_s: int) -> dict[str, Any]:
    """A watch's keywords: from `resource_version`, with bookmarks, ended by the server after
    `timeout_s`; the read timeout 30 s past that (a silent connection is a dropped one)."""
    return {
        "watch": True,
        "resource_version": resource_version,
        "allow_watch_bookmarks": True,
        "timeout_seconds": timeout_s,
        "_request_timeout": aiohttp.ClientTimeout(
            connect=10, sock_connect=10, sock_read=timeout_s + 30
        ),
    }


def _watch_error(status: Any, what: str = "pods") -> KubeError:
    """An ERROR event's Status as KubeError (410: the version is too old, relist)."""
    doc = status if isinstance(status, dict) else {}
    code = doc.get("code")
    message = one_line(str(doc.get("message") or doc.get("reason") or "an error event"))
    return KubeError(
        f"the watch of {what}: {message}", status=code if isinstance(code, int) else None
    )


def _status_message(body: bytes) -> str:
    """The `message` of a Kubernetes Status body; the text itself, cut, when not one."""
    try:
        doc = json.loads(body)
        if isinstance(doc, dict) and isinstance(doc.get("message"), str):
            return one_line(doc["message"])
    except ValueError:
        pass
    return one_line(body.decode("utf-8", errors="replace"))[:200]


def one_line(text: str) -> str:
    """`text` on one line, its runs of whitespace one space each."""
    return " ".join(text.split())
