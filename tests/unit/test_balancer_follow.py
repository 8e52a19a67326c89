"""The balancer following a feed of upstreams (Kubernetes' Ready pods): a new replica waits for
its first /health answer, one that leaves drains (nothing new, what it holds finishes) and is
removed, and each move is an event."""

from __future__ import annotations

from llmtop.gateway.upstreams.balancer import DRAINING, OK, PROBING, Balancer


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def changes(bal: Balancer) -> list[tuple[str, str]]:
    return [(e.change, e.url.rsplit(":", 1)[-1]) for e in bal.events]


def test_a_new_replica_waits_for_its_first_answer() -> None:
    bal = Balancer(["http://a:1"], clock=Clock())
    (a,) = bal.replicas
    bal.follow(["http://a:1", "http://b:2/"])
    b = bal.replicas[1]
    assert (b.url, b.state) == ("http://b:2", PROBING)
    assert [bal.pick() for _ in range(3)] == [a, a, a]  # not before it answers
    assert bal.to_probe() == [b]
    bal.probed(b, None)
    assert b.state == OK
    assert changes(bal) == [("added", "2"), ("up", "2")]
    bal.start(a)
    assert bal.pick() is b


def test_a_replica_that_leaves_drains_then_goes() -> None:
    bal = Balancer(["http://a:1", "http://b:2"], clock=Clock(), max_per_replica=4)
    a, b = bal.replicas
    bal.start(b)
    bal.start(b)
    bal.follow(["http://a:1"])
    assert b.state == DRAINING
    assert bal.capacity() == 4  # only a's room counts
    assert all(bal.pick() is a for _ in range(5))
    assert bal.to_probe() == []  # no probes of a leaving pod
    assert bal.to_check() == [a]
    bal.done(b)
    assert bal.replicas == [a, b]  # one request still there
    bal.done(b, error="upstream unreachable: ConnectError")  # the pod went: no ejection
    assert bal.replicas == [a]
    assert changes(bal) == [("draining", "2"), ("removed", "2")]
    assert bal.events[0].reason == "2 in flight"
    assert bal.events[1].reason == "drained"


def test_an_idle_replica_that_leaves_goes_at_once_and_may_come_back() -> None:
    bal = Balancer(["http://a:1", "http://b:2"], clock=Clock())
    a, b = bal.replicas
    bal.follow(["http://a:1"])
    assert bal.replicas == [a]
    bal.follow(["http://a:1", "http://b:2"])  # a restart: Ready again
    b2 = bal.replicas[1]
    assert b2 is not b
    assert b2.state == PROBING
    assert changes(bal) == [("removed", "2"), ("added", "2")]


def test_named_again_while_draining_it_is_probed_back() -> None:
    bal = Balancer(["http://a:1", "http://b:2"], clock=Clock())
    _, b = bal.replicas
    bal.start(b)
    bal.follow(["http://a:1"])
    bal.probed(b, None)  # a probe sent before it left: does not bring it back
    assert b.state == DRAINING
    bal.follow(["http://a:1", "http://b:2"])
    assert b.state == PROBING
    bal.probed(b, None)
    assert b.state == OK
    bal.done(b)
    assert b in bal.replicas


def test_no_replica_at_all_and_a_draining_one_is_never_picked() -> None:
    bal = Balancer([], clock=Clock(), allow_empty=True, max_per_replica=2)
    assert bal.pick() is None
    assert bal.capacity() == 0
    bal.follow(["http://a:1"])
    (a,) = bal.replicas
    assert bal.pick() is a  # every replica out: panic routing takes the new one
    bal.start(a)
    bal.follow([])
    assert a.state == DRAINING
    assert bal.pick() is None  # even in panic, nothing new goes to a leaving pod
    assert bal.to_list()[0]["state"] == "draining"
