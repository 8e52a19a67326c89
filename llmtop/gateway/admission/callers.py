"""Who a request is and what it may claim: its tenant (the rate limit's bucket) and its priority. By
default the API key decides: the tenant is the key table's name for it (else the key's hash, else
"anonymous"), x-llmtop-tenant is ignored, and x-llmtop-priority is clamped to the key's highest
("normal" off the table; less is always allowed). trust_client_headers takes both headers as sent,
for a gateway behind an authenticating proxy. Pure; keys are compared by SHA-256, never kept."""

from __future__ import annotations

import hashlib
from typing import NamedTuple

from llmtop.gateway.admission.controller import PRIORITIES
from llmtop.tenants import ApiKey

ANONYMOUS = "anonymous"
"""The tenant of requests that carry no API key: one shared bucket."""
KEY_TENANT_PREFIX = "key:"
"""Tenants of keys not in the table: this and the first 16 hex digits of the key's SHA-256."""
_RANK = {p: i for i, p in enumerate(PRIORITIES)}


def hash_key(key: str | bytes) -> str:
    """The SHA-256 hex of an API key, as the key table stores it."""
    raw = key.encode("utf-8") if isinstance(key, str) else key
    return hashlib.sha256(raw).hexdigest()


def bearer_key(authorization: bytes) -> bytes:
    """The key of an Authorization value: what follows `Bearer `, else the whole value."""
    value = authorization.strip()
    scheme, _, rest = value.partition(b" ")
    if scheme.lower() == b"bearer" and rest.strip():
        return rest.strip()
    return value


class Caller(NamedTuple):
    """What admission gets for one request, and whether its priority was lowered."""

    tenant: str
    priority: str
    clamped: bool


class CallerRules:
    """The gateway's rule for tenant and priority, from its settings."""

    def __init__(self, keys: tuple[ApiKey, ...] = (), *, trust_headers: bool = False) -> None:
        self.trust_headers = trust_headers
        self._keys = {k.sha256: k for k in keys}
        self.clamped = 0
        """Requests whose claimed priority was above their key's highest."""

    def caller(
        self, authorization: bytes | None, priority: str | None, tenant: bytes | None
    ) -> Caller:
        """Tenant and priority of a request; `priority` is the header's valid value or None."""
        key = None
        digest = ""
        if authorization:
            digest = hash_key(bearer_key(authorization))
            key = self._keys.get(digest)
        if key is not None:
            own_tenant = key.tenant
        elif digest:
            own_tenant = KEY_TENANT_PREFIX + digest[:16]
        else:
            own_tenant = ANONYMOUS
        if self.trust_headers:
            name = tenant.decode("latin-1") if tenant else own_tenant
            return Caller(name, priority or "normal", False)
        highest = key.max_priority if key is not None else "normal"
        wanted = priority or "normal"
        if _RANK[wanted] >= _RANK[highest]:
            return Caller(own_tenant, wanted, False)
        clamped = priority is not None
        if clamped:
            self.clamped += 1
        return Caller(own_tenant, highest, clamped)
