"""The sim's timed faults on real sockets: `slow` stretches each engine step 5x (read on the
engine's own clock, so a busy box does not change the figure), `garbage` answers generation with
bytes the gateway cannot take (a 502 with a JSON body, the replica ejected), both turned on at
run time through POST /sim/fault, and refused with a 400 naming what is wrong."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

from llmtop.asgi.uvicorn_runner import ServerThread
from llmtop.sim.faults import SLOW_FACTOR
from tests.support.gateway_sim import engine_of

Start = Callable[..., ServerThread]
BODY = {"model": "llmtop-sim", "prompt": "hello", "max_tokens": 32}


def e2e_s(sim: ServerThread, c: httpx.Client) -> float:
    """One request's engine-clock latency (from the sim's e2e histogram)."""
    hist = engine_of(sim).stats.e2e
    before = hist.total
    assert c.post(sim.url + "/v1/completions", json=BODY).status_code == 200
    return hist.total - before


def test_slow_stretches_each_step_by_its_factor(start_sim: Start) -> None:
    sim = start_sim(profile="fast")
    with httpx.Client(timeout=30) as c:
        normal = e2e_s(sim, c)
        r = c.post(sim.url + "/sim/fault", json={"fault": "slow+60"})
        assert r.status_code == 200
        assert r.json()["faults"][0][0] == "slow"
        slow = e2e_s(sim, c)
        assert c.get(sim.url + "/health").status_code == 200
    # a step's own length, stretched: the ratio is the factor (a late wake-up adds, not takes)
    assert slow / normal >= SLOW_FACTOR * 0.8


def test_garbage_is_a_502_with_a_json_body_at_the_gateway(
    start_sim: Start, start_gateway: Start
) -> None:
    sim = start_sim(profile="fast")
    gw = start_gateway(sim.url)
    with httpx.Client(timeout=30) as c:
        assert c.post(sim.url + "/sim/fault", json={"fault": "garbage+60"}).status_code == 200
        r = c.post(gw.url + "/v1/completions", json=BODY)
        assert r.status_code == 502
        error: dict[str, Any] = r.json()["error"]
        assert error["type"] == "upstream_error"
        assert "BadResponse" in error["message"]
        s = c.get(gw.url + "/admin/stats").json()
        assert s["replicas"][0]["state"] == "ejected"
        assert s["outcomes"]["upstream_error"] == 1
        assert c.get(sim.url + "/health").status_code == 200  # only generation is garbage


def test_a_bad_fault_request_is_a_400_naming_it(start_sim: Start) -> None:
    sim = start_sim(profile="fast")
    with httpx.Client(timeout=10) as c:
        for body, words in [
            ({"fault": "hang"}, "unknown fault 'hang'"),
            ({"fault": "scheduler-stuck"}, "set at start only"),
            ({"nope": 1}, "expected"),
            ([1], "expected"),
        ]:
            r = c.post(sim.url + "/sim/fault", json=body)
            assert r.status_code == 400
            assert words in r.json()["error"]["message"]
        r = c.post(sim.url + "/sim/fault", content=b"{not json")
        assert r.status_code == 400
