"""One engine pod for the commands that read one engine (`llmtop whatif`): the selector (or the
InferencePool) must name exactly one pod that is Running and Ready; it is read through the API
server's pod proxy with the kubeconfig's credentials from outside the cluster, at its IP from
inside, through an httpx transport that signs what goes to the API server."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import httpx

from llmtop.errors import UsageError

if TYPE_CHECKING:
    from llmtop.sources.kube.client import KubeApi


def engine_target(
    vllm: str | None,
    k8s_selector: str | None = None,
    inference_pool: str | None = None,
    **kwargs: str | None,
) -> tuple[str, httpx.AsyncBaseTransport | None]:
    """The one engine a command reads: `vllm` as given (no transport), or the one pod of
    `k8s_selector` / `inference_pool` (and `k8s_namespace`, `k8s_context`, `kubeconfig`);
    UsageError for neither or both. The Kubernetes client is imported only for a pod."""
    if k8s_selector or inference_pool:
        if vllm:
            raise UsageError("give --vllm or the Kubernetes pod to read, not both")
        return one_pod(
            k8s_selector,
            inference_pool,
            namespace=kwargs.get("k8s_namespace"),
            context=kwargs.get("k8s_context"),
            kubeconfig=kwargs.get("kubeconfig"),
        )
    if not vllm:
        raise UsageError("give --vllm URL, or one pod: --k8s-selector or --inference-pool")
    return vllm, None


class PodProxyTransport(httpx.AsyncBaseTransport):
    """Requests under the API server's URL carry its credentials over its TLS (the cluster's
    CA, a client certificate); a 401 asks them to refresh; other URLs go as they are."""

    def __init__(self, api: KubeApi) -> None:
        self._api = api
        verify = api.ssl if api.ssl is not None else False  # plain HTTP: kubectl proxy
        self._signed = httpx.AsyncHTTPTransport(verify=verify)
        self._plain = httpx.AsyncHTTPTransport(verify=False)  # pod IPs: http:// only

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if not str(request.url).startswith(self._api.server + "/"):
            return await self._plain.handle_async_request(request)
        request.headers.update(await self._api.auth_headers())
        response = await self._signed.handle_async_request(request)
        if response.status_code == 401:
            self._api.token_refused()
        return response

    async def aclose(self) -> None:
        await self._signed.aclose()
        await self._plain.aclose()


def one_pod(
    selector: str | None,
    pool: str | None,
    *,
    namespace: str | None = None,
    context: str | None = None,
    kubeconfig: str | None = None,
    command: str = "whatif",
) -> tuple[str, httpx.AsyncBaseTransport]:
    """The base URL of the one serving pod and the transport to read it with; UsageError when
    none or several are serving (naming them), KubeError or ConfigError as discovery's."""
    from llmtop.sources.kube.discovery import PodDiscovery  # the client: ~1.5 s to import

    d = PodDiscovery(selector or "", pool=pool, namespace=namespace, context=context,
                     kubeconfig=kubeconfig)  # fmt: skip

    async def look() -> None:
        try:
            await d.start()
        finally:
            await d.aclose()

    asyncio.run(look())
    targets = d.targets()
    what = f"InferencePool {pool}" if pool else f"--k8s-selector {selector}"
    if len(targets) != 1:
        names = ", ".join(t.name for t in targets) or "none"
        raise UsageError(
            f"{command} reads one engine: {what} names {len(targets)} pods Running and Ready"
            f" ({names}); narrow the selector to one (e.g. add"
            " statefulset.kubernetes.io/pod-name=NAME)"
        )
    assert d.api is None  # closed: the transport needs only its credentials and TLS
    api = d.last_api
    assert api is not None
    return targets[0].url, PodProxyTransport(api)


__all__ = ["PodProxyTransport", "engine_target", "one_pod"]
