"""The admin API fuzzed with hypothesis: any body, any JSON, any value of any limit, odd
methods and paths. Never a 5xx; a bad change is a 400 that names the field (or says the body is
not a JSON object) and changes nothing; a good one round-trips through GET /admin/limits.

httpx.ASGITransport is enough here (no streaming, no lifespan), so thousands of inputs run in
seconds. The count tried goes into the suite's figures.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
from typing import Any

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmtop.gateway.admission.controller import Limits
from llmtop.gateway.server.app import create_app
from llmtop.settings import GatewaySettings
from tests.support.faults import FIGURES

FIELDS = sorted(Limits(max_concurrency=1, max_queue=0, queue_timeout_s=1.0).to_dict())
EXAMPLES = int(os.environ.get("LLMTOP_FUZZ_EXAMPLES", "400"))
"""Inputs per fuzz test: 400 in the default run; LLMTOP_FUZZ_EXAMPLES=20000 for a long run."""
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(10**400), max_value=10**400)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)
changes = st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=16), json_values, max_size=5)
one_field = st.builds(lambda f, v: {f: v}, st.sampled_from(FIELDS), scalars)
bodies = (
    changes.map(json.dumps)
    | one_field.map(json.dumps)
    | json_values.map(json.dumps)
    | st.binary(max_size=64).map(lambda b: b.decode("latin-1"))
    | st.just("")
    | st.just("{")
    | st.just('{"max_concurrency": 1e999}')
    | st.just('{"max_queue": NaN}')
).map(lambda s: s.encode("utf-8", "surrogatepass"))


class Admin:
    """A gateway app and a client to it on one private event loop (hypothesis runs sync)."""

    def __init__(self, **overrides: Any) -> None:
        self.app = create_app(GatewaySettings(upstream="http://127.0.0.1:1", **overrides))
        self.loop = asyncio.new_event_loop()
        self.client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=self.app), base_url="http://gw"
        )

    def request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        response: httpx.Response = self.loop.run_until_complete(
            self.client.request(method, path, **kw)
        )
        return response

    def close(self) -> None:
        self.loop.run_until_complete(self.client.aclose())
        self.loop.close()


def same(sent: Any, got: Any) -> bool:
    if isinstance(sent, float) and math.isnan(sent):
        return False
    if isinstance(got, float) and isinstance(sent, int):
        return float(sent) == got  # an integer given for a seconds or per-minute limit
    return bool(sent == got)


def test_patch_limits_fuzzed_never_5xx_and_names_the_field() -> None:
    admin = Admin()
    tried = 0

    @FUZZ
    @given(body=bodies, source=st.binary(max_size=80))
    def check(body: bytes, source: bytes) -> None:
        nonlocal tried
        tried += 1
        before = admin.request("GET", "/admin/limits").json()
        r = admin.request(
            "PATCH",
            "/admin/limits",
            content=body,
            headers=[(b"content-type", b"application/json"), (b"x-llmtop-source", source)],
        )
        assert r.status_code in (200, 400), (r.status_code, r.text, body)
        after = admin.request("GET", "/admin/limits").json()
        try:
            sent = json.loads(body)
        except ValueError:
            sent = None
        if r.status_code == 200:
            assert isinstance(sent, dict)
            assert r.json() == after
            for field, value in sent.items():
                assert same(value, after[field]), (field, value, after)
            return
        assert after == before, "a refused change changed something"
        err = r.json()["error"]
        assert isinstance(err["message"], str)
        assert err["message"]
        assert "\n" not in err["message"]
        if isinstance(sent, dict) and sent:
            assert err["field"] in sent, (err, sent)
            # named as is, or as its repr when it is an unknown, odd key
            assert err["field"] in err["message"] or repr(err["field"]) in err["message"]
        else:
            assert err["message"] == "body must be a JSON object of limits"

    try:
        check()
    finally:
        admin.close()
    FIGURES["inputs"] += tried


def test_admin_methods_and_paths_fuzzed_never_5xx() -> None:
    admin = Admin()
    tried = 0
    paths = st.sampled_from(
        ["/admin/limits", "/admin/stats", "/admin/events", "/admin/pause", "/admin/resume"]
    ) | st.text(alphabet="abcdefghijklmnopqrstuvwxyz/_-", max_size=20).map(lambda p: "/admin/" + p)

    @FUZZ
    @given(
        method=st.sampled_from(["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]),
        path=paths,
        body=st.binary(max_size=32),
    )
    def check(method: str, path: str, body: bytes) -> None:
        nonlocal tried
        tried += 1
        r = admin.request(method, path, content=body)
        assert r.status_code < 500, (method, path, r.status_code, r.text)
        assert r.status_code in (200, 400, 404, 405), (method, path, r.status_code)

    try:
        check()
    finally:
        admin.close()
    FIGURES["inputs"] += tried
