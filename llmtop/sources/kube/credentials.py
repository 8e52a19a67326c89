"""Which API server, as whom: a kubeconfig context (token, client certificate, exec plugin) or
the pod's service account, made into a `KubeApi`; and the exec plugin run again as its credential
expires or a 401 asks. Apart from `client.py`, the one module that uses kubernetes_asyncio (its
config loaders); every failure a `ConfigError` (the file or the flags) or `KubeError` (the login).
"""

from __future__ import annotations

import datetime
import os
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config
from kubernetes_asyncio.config.config_exception import ConfigException

from llmtop.errors import ConfigError, KubeError
from llmtop.sources.kube.client import KubeApi, one_line

SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


async def connect(*, kubeconfig: str | None = None, context: str | None = None) -> KubeApi:
    """The API of a kubeconfig context (`kubeconfig`, else $KUBECONFIG, else ~/.kube/config;
    `context`, else its current one), or of the pod's service account when there is no
    kubeconfig and the process runs in a cluster. ConfigError for a kubeconfig that cannot be
    used as asked; nothing is sent to the API here."""
    chosen = _context_of(kubeconfig, context)
    if chosen is None:
        return _in_cluster()
    path, name, namespace = chosen
    cfg = k8s_client.Configuration()
    try:
        loader = await k8s_config.load_kube_config(
            config_file=path, context=name, client_configuration=cfg, persist_config=False
        )
    except Exception as e:  # the loader's errors, its exec plugin's included
        why = one_line(str(e)) or type(e).__name__
        if why.startswith("exec:") or isinstance(e, OSError | RuntimeError):
            raise KubeError(  # not a mistake in the file: the login it runs failed
                f"the credentials of context {name} ({path}): its exec plugin failed: {why}"
            ) from None
        raise ConfigError(f"kubeconfig {path}, context {name}: {why}") from None
    refresh = None
    if "exec" in (loader._user or {}):
        refresh = cfg.refresh_api_key_hook = ExecRefresh(loader)
    api = k8s_client.ApiClient(configuration=cfg)
    return KubeApi(api, cfg, context=name, namespace=namespace, in_cluster=False, refresh=refresh)


def _context_of(kubeconfig: str | None, context: str | None) -> tuple[str, str, str] | None:
    """(kubeconfig path, context, its namespace); None for the pod's service account (no
    kubeconfig named or found, inside a cluster); ConfigError for a missing file, an unknown
    context or a file that is not a kubeconfig."""
    path = kubeconfig or os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
    files = [p for p in path.split(os.pathsep) if p]
    if not any(Path(p).exists() for p in files):
        in_pod = os.environ.get("KUBERNETES_SERVICE_HOST") and (SA_DIR / "token").exists()
        if kubeconfig is None and in_pod:
            return None
        raise ConfigError(
            f"no kubeconfig at {path} (give --kubeconfig, set KUBECONFIG, or run in a cluster)"
        )
    try:
        contexts, current = k8s_config.list_kube_config_contexts(config_file=path)
    except ConfigException as e:
        raise ConfigError(f"kubeconfig {path}: {one_line(str(e))}") from None
    except Exception as e:  # YAML that does not parse, or is no kubeconfig: the loader's own
        why = one_line(str(e)) or type(e).__name__  # errors (yaml's, TypeError, ...)
        raise ConfigError(f"kubeconfig {path} is not a kubeconfig llmtop can read: {why}") from None
    names = [str(c.get("name")) for c in contexts or []]
    chosen = context or (str(current["name"]) if current else None)
    if chosen is None:
        raise ConfigError(f"kubeconfig {path} has no current context: give --k8s-context")
    if chosen not in names:
        known = ", ".join(names) or "none"
        raise ConfigError(f"kubeconfig {path} has no context {chosen!r} (it has: {known})")
    namespace = next(
        (str(c["context"].get("namespace") or "default") for c in contexts if c["name"] == chosen),
        "default",
    )
    return path, chosen, namespace


def _in_cluster() -> KubeApi:
    """The pod's service account: its token (re-read as the kubelet rotates it), CA and
    namespace."""
    cfg = k8s_client.Configuration()
    try:
        k8s_config.load_incluster_config(  # type: ignore[no-untyped-call]
            client_configuration=cfg,
            token_filename=str(SA_DIR / "token"),  # re-read each minute: the kubelet rotates it
            cert_filename=str(SA_DIR / "ca.crt"),
        )
        namespace = (SA_DIR / "namespace").read_text(encoding="utf-8").strip() or "default"
    except (ConfigException, OSError) as e:
        raise ConfigError(f"in-cluster service account: {one_line(str(e))}") from None
    api = k8s_client.ApiClient(configuration=cfg)
    return KubeApi(api, cfg, context=None, namespace=namespace, in_cluster=True)


class ExecRefresh:
    """The hook the client awaits before each request: the exec plugin run again once its
    credential's expirationTimestamp is a minute away (or a 401 asked for it); a credential
    without one holds until a 401 (client-go does the same)."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader
        self.force = False

    async def __call__(self, cfg: Any) -> None:
        expiry = getattr(self.loader, "exec_plugin_expiry", None)
        if not self.force:
            if not isinstance(expiry, datetime.datetime):
                return
            if expiry.tzinfo is None:
                expiry = expiry.replace(tzinfo=datetime.timezone.utc)
            soon = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(minutes=1)
            if expiry > soon:
                return
        self.force = False
        if hasattr(self.loader, "exec_plugin_expiry"):
            del self.loader.exec_plugin_expiry  # else the loader keeps its cached credential
        await self.loader.load_from_exec_plugin()
        if getattr(self.loader, "token", None):
            cfg.api_key["BearerToken"] = self.loader.token
