"""The gateway's limit changes read out of Prometheus' range (`prometheus_history.limit_changes`)
on made-up steps: a gauge that moved is one /admin/events-shaped change with no `source`, a
gauge gone while the gateway was scraped is a limit switched off, a step without the gateway is
unknown (no change), the same change at two gateways is one; and the log's line for it
(`tui.view.past.unseen_events`) says who is not in Prometheus."""

from __future__ import annotations

from typing import Any

from llmtop.sources.prometheus_history import GATEWAY_METRICS, WHO_UNKNOWN, limit_changes
from llmtop.tui.view.past import unseen_events

CAP = "llmtop_gateway_limit_max_concurrency"
RPM = "llmtop_gateway_limit_rate_limit_rpm"
TIMEOUT = "llmtop_gateway_limit_queue_timeout_seconds"
PAUSED = "llmtop_gateway_paused"


def _step(t: float, gauges: dict[str, float], instance: str = "gw:9000") -> list[dict[str, Any]]:
    """One step's instant vector as `_by_time` groups a range answer."""
    return [
        {"metric": {"__name__": n, "instance": instance, "job": "gw"}, "value": [t, repr(v)]}
        for n, v in gauges.items()
    ]


def test_the_gauge_names_are_the_gateways() -> None:
    assert GATEWAY_METRICS[CAP] == "max_concurrency"
    assert GATEWAY_METRICS[TIMEOUT] == "queue_timeout_s"
    assert GATEWAY_METRICS["llmtop_gateway_limit_ttft_slo_seconds"] == "ttft_slo_s"
    assert "mode" not in GATEWAY_METRICS.values()  # a choice has no gauge


def test_a_moved_gauge_is_a_change_with_no_who() -> None:
    steady = {CAP: 256.0, TIMEOUT: 180.0, PAUSED: 0.0}
    steps = {
        1.0: _step(1.0, steady),
        2.0: _step(2.0, steady),
        3.0: _step(3.0, {**steady, CAP: 9.0}),
        4.0: _step(4.0, {**steady, CAP: 9.0}),
    }
    assert limit_changes(steps) == {
        3.0: [
            {
                "time": 3.0,
                "field": "max_concurrency",
                "old": 256,
                "new": 9,
                "source": None,
                "reason": WHO_UNKNOWN,
            }
        ]
    }
    (event,) = limit_changes(steps)[3.0]
    assert isinstance(event["new"], int)  # a count as /admin/limits writes it


def test_off_on_pause_and_a_gateway_not_scraped() -> None:
    base = {CAP: 8.0, PAUSED: 0.0}
    steps = {
        1.0: _step(1.0, base),
        2.0: _step(2.0, {**base, RPM: 600.0}),  # rate limit switched on
        3.0: _step(3.0, {CAP: 8.0}),  # no _paused: the gateway not scraped, nothing known
        4.0: [],  # nothing at all
        5.0: _step(5.0, {**base, PAUSED: 1.0}),  # rpm's gauge gone: off; and paused
    }
    got = limit_changes(steps)
    assert sorted(got) == [2.0, 5.0]
    (on,) = got[2.0]
    assert (on["field"], on["old"], on["new"]) == ("rate_limit_rpm", None, 600.0)
    fields = {e["field"]: (e["old"], e["new"]) for e in got[5.0]}
    assert fields == {"rate_limit_rpm": (600.0, None), "paused": (False, True)}


def test_the_same_change_at_two_gateways_is_one() -> None:
    def both(t: float, cap: float) -> list[dict[str, Any]]:
        gauges = {CAP: cap, PAUSED: 0.0}
        return _step(t, gauges, "gw-a:9000") + _step(t, gauges, "gw-b:9000")

    got = limit_changes({1.0: both(1.0, 4.0), 2.0: both(2.0, 2.0)})
    assert [(e["old"], e["new"]) for e in got[2.0]] == [(4, 2)]


def test_nan_and_junk_points_are_unknown_not_zero() -> None:
    steps: dict[float, list[dict[str, Any]]] = {
        1.0: _step(1.0, {CAP: 4.0, PAUSED: 0.0}),
        2.0: [
            {"metric": {"__name__": CAP, "instance": "gw:9000", "job": "gw"}, "value": [2, "NaN"]},
            {"metric": {"__name__": PAUSED, "instance": "gw:9000", "job": "gw"}, "value": [2, "0"]},
            {"metric": "junk", "value": [2, "1"]},
        ],
    }
    ((event,),) = limit_changes(steps).values()
    assert (event["old"], event["new"]) == (4, None)  # a NaN gauge reads as no value


def test_the_log_line_says_who_is_not_in_prometheus() -> None:
    steady = {CAP: 256.0, TIMEOUT: 180.0, PAUSED: 0.0}
    got = limit_changes(
        {1.0: _step(1.0, steady), 2.0: _step(2.0, {**steady, CAP: 9.0, TIMEOUT: 30.0})}
    )
    (line,) = unseen_events(2.0, got[2.0])
    assert line.kind == "limit"
    assert line.text == "limits: cap 256 -> 9, timeout 180s -> 30s (who: not in Prometheus)"
    pause = {"time": 3.0, "field": "paused", "old": False, "new": True, "source": "oncall"}
    (paused,) = unseen_events(3.0, [pause])
    assert paused.text == "admission PAUSED (by oncall)"
    assert unseen_events(4.0, []) == []
