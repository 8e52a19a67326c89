"""The chaos run's ledger rules (harness/chaos_ledger.py), pure: each answer's one outcome, the
clients' tallies in the gateways' terms, the schedule, and which findings name which fault."""

from __future__ import annotations

import pytest

from harness.chaos_ledger import (
    Entry,
    Injection,
    disagreements,
    gateway_tally,
    named,
    outcome_of_body,
    outcome_of_stream,
    schedule,
    tallies,
)

ERR = b'{"error": {"message": "m", "type": "t", "code": 502}}'


def test_each_answer_has_one_outcome() -> None:
    assert outcome_of_body(200, {}, b'{"choices": []}') == ("served", "")
    assert outcome_of_body(200, {}, b"\x00junk")[0] == "lost"
    assert outcome_of_body(429, {"retry-after": "1"}, ERR) == ("rejected", "")
    assert outcome_of_body(429, {}, ERR) == ("lost", "429 without Retry-After")
    assert outcome_of_body(502, {}, ERR) == ("error", "")
    assert outcome_of_body(502, {}, b"<html>") == ("lost", "502 without a JSON error body")
    assert outcome_of_stream([b"{}", b"[DONE]"]) == ("served", "")
    assert outcome_of_stream([ERR, b"[DONE]"]) == ("error", "")
    assert outcome_of_stream([b"{}"]) == ("lost", "stream ended without [DONE]")
    e = Entry(1, "plain", "gw0#0", 0.0)
    e.end("served")
    with pytest.raises(AssertionError, match="ended twice"):
        e.end("error")


def test_the_clients_ledger_in_the_gateways_terms() -> None:
    def entry(kind: str, status: int | None, outcome: str) -> Entry:
        e = Entry(0, kind, "gw0#0", 0.0, status=status)
        e.end(outcome)
        return e

    entries = [
        entry("plain", 200, "served"),
        entry("stream", 200, "error"),  # an error event on a begun stream
        entry("cancel", 200, "cancelled"),
        entry("plain", 429, "rejected"),
        entry("bad-model", 404, "error"),  # the engine's 404, relayed whole
        entry("bad-large", 413, "error"),  # refused before admission
        entry("plain", 502, "error"),
    ]
    mine = tallies(entries)
    counts = {
        "answers": {"200": 3, "404": 1, "413": 1, "429": 1, "502": 1},
        "outcomes": {"completed": 2, "cancelled": 1, "rejected": 0, "timed_out": 1,
                     "upstream_error": 2},
    }  # fmt: skip
    assert disagreements(mine, {"gw0#0": gateway_tally(counts)}) == []
    counts["answers"] = {"200": 4, "404": 1, "413": 1, "429": 1, "502": 1}
    assert disagreements(mine, {"gw0#0": gateway_tally(counts)}) == [
        "gw0#0: answers clients {'200': 3, '429': 1, '404': 1, '413': 1, '502': 1} != gateway"
        " {'200': 4, '404': 1, '413': 1, '429': 1, '502': 1}"
    ]
    assert disagreements(mine, {}) == ["gw0#0: no counts from the gateway (did it stop cleanly?)"]


def test_the_schedule_has_every_fault_per_round_on_both_sides() -> None:
    one = schedule(62, 1)
    assert [i.kind for i in one] == [
        "replica-kill", "replica-stop", "redis-kill", "replica-slow", "gateway-roll",
        "replica-garbage",
    ]  # fmt: skip
    assert max(i.at_s + i.for_s for i in one) <= 62
    two = schedule(600, 2)
    assert len(two) == 12
    assert {i.target for i in two if i.kind == "gateway-roll"} == {0, 1}
    with pytest.raises(ValueError, match="need 120 s of load"):
        schedule(100, 2)


def test_a_fault_is_named_by_its_finding_for_its_url_within_the_window() -> None:
    kill = Injection(2.0, "replica-kill", 0, 4.0)
    roll = Injection(40.0, "gateway-roll", 0, 0.0)
    findings: list[dict[str, object]] = [
        {"id": "replica-down", "fired": 1002.5, "summary": "down: 127.0.0.1:9001"},
        {"id": "replica-down", "fired": 1001.0, "summary": "down: 127.0.0.1:9002"},
        {"id": "gateway-down", "fired": 1046.0, "summary": "gateway not answering"},
    ]
    got = named(
        [(kill, 1000.0, "http://127.0.0.1:9001"), (roll, 1040.0, None)], findings, within_s=5
    )
    assert [(n.finding, n.delay_s) for n in got] == [("replica-down", 2.5), (None, None)]


def test_the_other_gateways_roll_is_named_by_its_drain() -> None:
    roll = Injection(158.0, "gateway-roll", 1, 0.0)
    findings: list[dict[str, object]] = [
        {"id": "gateway-peer-draining", "fired": 1000.25, "summary": "1 of 2 ... is draining"},
        {"id": "gateway-peer-lost", "fired": 1004.0, "summary": "1 of the 2 gateways ... gone"},
    ]
    got = named([(roll, 1000.0, None)], findings, within_s=5)
    assert [(n.finding, n.delay_s) for n in got] == [("gateway-peer-draining", 0.25)]
