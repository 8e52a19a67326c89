"""What a gateway holds while Redis is away (gateway/upstreams/fallback.py), on a fake clock:
the sequences that over-ran the global cap when each fell back to cap / live at once."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from llmtop.gateway.upstreams.fallback import Fallback, Lives, Rejoin, fallback_share

CAP = 6
LIFE_S = 2.0
TTL_S = 1.5
STEP_S = 0.05


@dataclass
class Gw:
    """One gateway with endless demand: it admits whenever it has room, each request
    holding `blocks` KV blocks for LIFE_S seconds."""

    grant: int
    grant_blocks: int | None = None
    blocks: int = 0
    ends: dict[int, float] = field(default_factory=dict)
    lives: Lives = field(default_factory=Lives)
    fallback: Fallback | None = None
    seq: int = 0

    def admit(self, now: float, until: float = LIFE_S) -> None:
        self.seq += 1
        self.ends[self.seq] = now + until
        self.lives.admitted(self.seq, now)

    def end_due(self, now: float) -> None:
        for key in [k for k, t in self.ends.items() if t <= now]:
            del self.ends[key]
            self.lives.ended(key, now)

    @property
    def in_flight(self) -> int:
        return len(self.ends)


def run_outage(
    gws: list[Gw], *, new_rule: bool, kv_cap: int | None = None, seconds: float = 12.0
) -> tuple[int, int, list[int]]:
    """Redis goes at t=10 with each gateway holding its grant in flight (admitted over the
    seconds before, so each has lives to learn from); then every STEP_S each ends what is due
    and admits up to what it may hold. The most in flight (and KV blocks) summed over the
    gateways, and what each may hold at the end."""
    now = 0.0
    for g in gws:  # each has served its grant for a while: its lives are known
        for k in range(g.grant):
            g.admit(10.0 - LIFE_S + k * 0.3 / max(1, g.grant), LIFE_S)
        g.lives.ended(-1, 0.0)  # an unknown key is ignored
        g.lives.admitted(-2, 8.0 - LIFE_S)
        g.lives.ended(-2, 8.0)  # one life of LIFE_S seen
    now = 10.0
    for g in gws:
        g.fallback = Fallback.begin(now, g.grant, g.grant_blocks, TTL_S, g.lives.longest_s(now))
    peak = peak_blocks = 0
    limits: list[int] = []
    while now < 10.0 + seconds:
        limits = []
        for g in gws:
            g.end_due(now)
            assert g.fallback is not None
            if new_rule:
                oldest = g.lives.oldest_admitted()
                slots, blocks = g.fallback.limits(now, CAP, kv_cap, len(gws), oldest)
            else:
                slots, blocks = fallback_share(CAP, len(gws)), fallback_share(kv_cap, len(gws))
            assert slots is not None
            while g.in_flight < slots and (
                blocks is None or (g.in_flight + 1) * g.blocks <= blocks
            ):
                g.admit(now)
            limits.append(slots)
        peak = max(peak, sum(g.in_flight for g in gws))
        peak_blocks = max(peak_blocks, sum(g.in_flight * g.blocks for g in gws))
        now += STEP_S
    return peak, peak_blocks, limits


def uneven() -> list[Gw]:
    return [Gw(grant=4), Gw(grant=1), Gw(grant=1)]


def test_the_old_share_at_once_over_runs_the_cap_with_uneven_grants() -> None:
    peak, _, _ = run_outage(uneven(), new_rule=False)
    assert peak == 7  # 3 of the first one's 4 still running, 2 + 2 at the others: the bug


def test_min_of_grant_and_share_keeps_the_sum_within_the_cap_then_rises() -> None:
    gws = uneven()
    peak, _, limits = run_outage(gws, new_rule=True)
    assert peak <= CAP
    assert limits == [2, 2, 2]  # the share once the first one's four could have ended
    assert sum(g.in_flight for g in gws) == CAP  # and the cap is in use again


def test_an_idle_gateway_rises_after_the_ttl_not_at_once() -> None:
    gws = [Gw(grant=6), Gw(grant=0), Gw(grant=0)]
    fb = Fallback.begin(10.0, 0, None, TTL_S, 0.0)
    assert fb.limits(10.0, CAP, None, 3, None) == (0, None)
    assert fb.limits(10.0 + TTL_S - 0.01, CAP, None, 3, None) == (0, None)
    assert fb.limits(10.0 + TTL_S, CAP, None, 3, None) == (2, None)
    peak, _, _ = run_outage(gws, new_rule=True)
    assert peak <= CAP


def test_the_rise_waits_for_the_longest_life_seen_here() -> None:
    lives = Lives()
    lives.admitted(1, 0.0)
    lives.ended(1, 7.0)  # a 7 s generation ended here lately
    fb = Fallback.begin(10.0, 1, None, TTL_S, lives.longest_s(10.0))
    assert fb.rise_after_s == 7.0
    assert fb.limits(16.9, CAP, None, 3, None) == (1, None)
    assert fb.limits(17.0, CAP, None, 3, None) == (2, None)
    assert Lives(keep_s=60.0).longest_s(5.0) == 0.0
    lives.admitted(2, 100.0)
    lives.ended(2, 100.5)
    assert lives.longest_s(100.5) == 0.5  # the 7 s one is over a minute old


def test_the_rise_waits_while_a_request_from_before_is_in_flight_here() -> None:
    fb = Fallback.begin(10.0, 1, None, TTL_S, 0.0)
    assert fb.limits(20.0, CAP, None, 3, 9.0) == (1, None)  # admitted at 9, still running
    assert fb.limits(20.0, CAP, None, 3, 10.5) == (2, None)  # only newer ones left
    assert fb.limits(20.1, CAP, None, 3, 9.0) == (2, None)  # risen for good


def test_kv_blocks_hold_the_same_way() -> None:
    kv_cap = 60
    gws = [Gw(grant=4, grant_blocks=40, blocks=10), Gw(1, 10, 10), Gw(1, 10, 10)]
    _, old_blocks, _ = run_outage(
        [Gw(grant=4, grant_blocks=40, blocks=10), Gw(1, 10, 10), Gw(1, 10, 10)],
        new_rule=False,
        kv_cap=kv_cap,
    )
    assert old_blocks > kv_cap
    peak, peak_blocks, _ = run_outage(gws, new_rule=True, kv_cap=kv_cap)
    assert peak <= CAP
    assert peak_blocks <= kv_cap
    assert sum(g.in_flight * g.blocks for g in gws) == kv_cap  # all of it in use again


def test_no_grant_when_redis_went_leaves_the_share() -> None:
    fb = Fallback.begin(0.0, None, None, TTL_S, 0.0)
    assert fb.limits(0.0, CAP, 30, 3, None) == (2, 10)
    assert fb.limits(0.0, None, None, 3, None) == (None, None)


@pytest.mark.parametrize(
    ("live", "now", "over"), [(1, 0.5, False), (3, 0.5, True), (2, 1.6, True), (2, 1.4, False)]
)
def test_rejoin_asks_for_what_it_held_until_the_others_are_back(
    live: int, now: float, over: bool
) -> None:
    rj = Rejoin(limit_slots=2, limit_kv_blocks=None, live=3, until=1.5)
    assert rj.clamp(5, 40) == (2, 40)
    assert rj.clamp(1, 40) == (1, 40)
    assert rj.over(now, live) is over
    assert not Rejoin(2, 10, live=3).over(99.0, 1)  # no answer yet: no deadline yet
    assert Rejoin(2, 10, live=3).clamp(5, 40) == (2, 10)
