"""The balancer on a fake clock: headroom, ties, per-replica limits, ejection and probes."""

from __future__ import annotations

from llmtop.gateway.upstreams.balancer import EJECTED, OK, PROBING, Balancer


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def make(n: int = 2, **kw: object) -> tuple[Balancer, Clock]:
    clock = Clock()
    urls = [f"http://127.0.0.1:{8000 + i}/" for i in range(n)]
    return Balancer(urls, clock=clock, **kw), clock  # type: ignore[arg-type]


def test_most_kv_headroom_wins() -> None:
    bal, _ = make()
    a, b = bal.replicas
    assert a.url == "http://127.0.0.1:8000"
    a.capacity_blocks, b.capacity_blocks = 100, 1000
    bal.start(a, 10)
    bal.start(b, 10)
    bal.start(b, 10)  # b has more in flight but far more room: 2 % used against a's 20 %
    assert bal.pick(10) is b


def test_ties_go_to_least_outstanding_then_queue() -> None:
    bal, _ = make(3)
    a, b, c = bal.replicas
    bal.start(a)
    bal.start(b)
    assert bal.pick() is c
    c.waiting = 5  # an engine queue weighs before outstanding requests
    assert bal.pick() is a


def test_per_replica_limit_and_capacity() -> None:
    bal, _ = make(max_per_replica=1)
    a, b = bal.replicas
    assert bal.capacity() == 2
    bal.start(a)
    assert bal.pick() is b
    bal.start(b)
    assert bal.pick() is None


def test_failure_ejects_until_probe_answers() -> None:
    bal, clock = make(eject_s=5.0)
    a, b = bal.replicas
    bal.start(a)
    bal.done(a, error="upstream unreachable: ConnectError")
    assert a.state == EJECTED
    assert a.healthy is False
    assert a.in_flight == 0
    assert [bal.pick() for _ in range(3)] == [b, b, b]
    assert bal.capacity() is None
    clock.t = 4.9
    assert bal.to_probe() == []
    clock.t = 5.0
    assert bal.to_probe() == [a]
    assert a.state == PROBING
    assert bal.pick() is b
    bal.probed(a, "unreachable: ConnectError")
    assert a.state == EJECTED
    assert a.failures == 2
    clock.t = 10.0
    bal.probed(a, None)
    assert a.state == OK
    assert bal.pick(exclude=[b]) is a


def test_all_out_routes_anyway_and_exclude_is_kept() -> None:
    bal, _ = make(1)
    (a,) = bal.replicas
    bal.start(a)
    bal.done(a, error="upstream returned 503")
    assert bal.pick() is a  # one upstream that failed once still gets the next request
    assert bal.pick(exclude=[a]) is None


def test_share_and_doc() -> None:
    bal, _ = make()
    a, b = bal.replicas
    for _ in range(3):
        bal.start(a)
    bal.start(b)
    bal.done(b)
    docs = {d["url"]: d for d in bal.to_list()}
    assert docs[a.url]["share"] == 0.75
    assert docs[a.url]["in_flight"] == 3
    assert docs[b.url]["share"] == 0.25
    assert docs[b.url]["healthy"] is True


def test_full_ties_take_turns() -> None:
    bal, _ = make(3)
    order = []
    for _ in range(6):
        r = bal.pick()
        assert r is not None
        bal.start(r)
        bal.done(r)
        order.append(r.url[-1])
    assert order == ["0", "1", "2", "0", "1", "2"]


def test_a_move_out_of_rotation_and_back_is_one_event_each() -> None:
    bal, clock = make(eject_s=5.0)
    a, b = bal.replicas
    assert bal.to_check() == [a, b]
    bal.probed(a, None)  # in service
    clock.t = 1.0
    bal.probed(a, "no /health answer within 2 s (hung)")
    assert bal.to_check() == [b]
    assert bal.pick() is b
    clock.t = 6.0  # its time is out: probed, still hung, ejected again: no second event
    assert bal.to_probe() == [a]
    bal.probed(a, "no /health answer within 2 s (hung)")
    clock.t = 11.5
    assert bal.to_probe() == [a]
    bal.probed(a, None)  # it answers: back
    bal.probed(b, None)  # in rotation all along: no event
    assert [(e.time, e.url, e.change, e.reason) for e in bal.events] == [
        (1.0, a.url, "out", "no /health answer within 2 s (hung)"),
        (11.5, a.url, "back", None),
    ]
    assert bal.events_total == 2
    assert a.state == OK


def test_the_deadline_must_be_positive_seconds() -> None:
    import pytest

    for bad in (0.0, -1.0, float("inf")):
        with pytest.raises(ValueError, match="replica_deadline_s must be > 0 seconds"):
            make(deadline_s=bad)


def test_a_check_that_left_before_an_ejection_does_not_end_it() -> None:
    bal, clock = make(eject_s=5.0)
    b = bal.replicas[1]
    assert b in bal.to_check()  # a /health check leaves for b
    bal.fail(b, "upstream returned 503")  # the proxy ejects it meanwhile
    bal.probed(b, None)  # the check's answer arrives
    assert b.state == EJECTED
    clock.t += 5.0
    assert bal.to_probe() == [b]  # its time is out: now a probe may bring it back
    bal.probed(b, None)
    assert b.state == OK


def test_out_of_rotation_says_for_how_long_and_how_long_it_is_back() -> None:
    bal, clock = make(eject_s=1.0)
    a, b = bal.replicas
    bal.probed(a, None)  # in service
    clock.t = 10.0
    bal.fail(a, "upstream returned 500")
    clock.t = 12.5  # its ejection is over: probing, still out
    doc = {d["url"]: d for d in bal.to_list()}[a.url]
    assert doc["state"] == PROBING
    assert doc["out_for_s"] == 2.5
    assert doc["back_s_ago"] is None
    assert doc["last_error"] == "upstream returned 500"
    bal.probed(a, "no /health answer within 2 s (hung)")  # out again: still one stretch out
    clock.t = 14.0
    assert {d["url"]: d for d in bal.to_list()}[a.url]["out_for_s"] == 4.0
    clock.t = 15.0
    bal.probed(a, None)  # back
    clock.t = 17.0
    doc = {d["url"]: d for d in bal.to_list()}[a.url]
    assert doc["state"] == OK
    assert doc["out_for_s"] is None
    assert doc["back_s_ago"] == 2.0
    never = {d["url"]: d for d in bal.to_list()}[b.url]
    assert never["out_for_s"] is None
    assert never["back_s_ago"] is None


def test_stream_rate_is_events_per_stream_second_over_the_last_second() -> None:
    bal, clock = make()
    a, b = bal.replicas
    m = a.meter
    assert m.rate() == (None, 0.0)
    m.begin()
    m.begin()  # two streams decoding
    for _ in range(8):  # 0.25 s apart: 50 events a request-second
        clock.t += 0.25
        m.events += 25
        bal.eligible()  # the balancer's tick keeps the meters' samples
    rate, request_s = m.rate()
    assert rate == 50.0
    assert request_s == 2.0  # two streams over the 1 s window
    m.end()
    for i in range(4):  # one left, 5x slower: the window holds only that now
        clock.t += 0.25
        m.events += 5 * (i % 2)
        bal.eligible()
    assert m.rate() == (10.0, 1.0)
    m.end()
    clock.t += 5.0  # none decoding: nothing to say
    doc = {d["url"]: d for d in bal.to_list()}
    assert doc[a.url]["request_tok_per_s"] is None
    assert doc[b.url]["request_seconds"] == 0.0


def test_a_stalled_stream_counts_its_time_at_once() -> None:
    """A stream whose replica stopped sending has its time counted, events or not."""
    bal, clock = make()
    m = bal.replicas[0].meter
    m.begin()
    for i in range(4):  # events for half a second, then a stall
        clock.t += 0.25
        m.events += 50 if i < 2 else 0
        bal.eligible()
    assert m.rate() == (100.0, 1.0)  # 100 events over 1 request-second, half of it silent


def test_a_whole_answer_counts_its_completion_tokens_over_its_time_at_its_end() -> None:
    bal, clock = make()
    m = bal.replicas[0].meter
    body = b'"usage":{"prompt_tokens":12,"total_tokens":44,"completion_tokens":32}}'
    clock.t = 1.0
    m.answered(body, 0.8)  # 32 tokens in 0.8 s: 40 a request-second
    m.answered(b'{"choices": []}', 0.5)  # no usage where it would be: says nothing
    assert m.rate() == (40.0, 0.8)


def test_an_engine_up_after_the_gateway_comes_up_not_back() -> None:
    """Out while it loads (the gateway started first), then up: it never served, so nothing
    says it is lately back; once it has served, a later ejection and return is."""
    bal, clock = make(1, eject_s=1.0)
    (a,) = bal.replicas
    bal.probed(a, "unreachable: ClientConnectorError")
    assert a.state == EJECTED
    clock.t = 3.0
    assert bal.to_probe() == [a]  # its ejection over: probed
    bal.probed(a, None)
    doc = bal.to_list()[0]
    assert (doc["state"], doc["back_s_ago"], doc["out_for_s"]) == (OK, None, None)
    assert [e.change for e in bal.events] == ["out", "up"]  # both logged
    bal.start(a)
    bal.done(a, error="upstream returned 502")
    clock.t = 5.0
    bal.to_probe()
    bal.probed(a, None)
    clock.t = 6.0
    assert bal.to_list()[0]["back_s_ago"] == 1.0
    assert [e.change for e in bal.events][2:] == ["out", "back"]
