"""The fleet's scrape client, through the API server's pod proxy: the kubeconfig's TLS (the
cluster's CA, a client certificate) and bearer token on each request to the API server; other
URLs (pods read by IP from inside the cluster) go as they are."""

from __future__ import annotations

from typing import Any

from llmtop.sources.http.scrape_client import Answer, ScrapeClient
from llmtop.sources.kube.discovery import PodDiscovery


class PodProxyClient(ScrapeClient):
    """A ScrapeClient that signs its requests to the API server of `discovery` (known once
    it started); a 401 asks the credentials to refresh before the next request."""

    def __init__(self, discovery: PodDiscovery, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._discovery = discovery

    async def _request(self, method: str, url: str, **kwargs: Any) -> Answer:
        api = self._discovery.api
        if api is None or not url.startswith(api.server + "/"):
            return await super()._request(method, url, **kwargs)
        headers = dict(kwargs.pop("headers", None) or {})
        headers.update(await api.auth_headers())
        if api.ssl is not None:
            kwargs["ssl"] = api.ssl
        answer = await super()._request(method, url, headers=headers, **kwargs)
        if answer.status == 401:
            api.token_refused()
        return answer
