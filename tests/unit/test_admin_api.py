"""core.base.admin_api: one table of the gateway's limits, read by every place that lists them."""

from __future__ import annotations

import dataclasses

import pytest

from llmtop.core.base.admin_api import LIMIT_FIELDS, LIMITS, check_changes, limit_spec
from llmtop.core.base.snapshot import GatewayStats
from llmtop.errors import LimitError, UsageError
from llmtop.gateway.admission.limits import Limits
from llmtop.settings import GatewaySettings
from llmtop.tui.view.commands import COMMANDS, parse_command


def test_the_table_matches_the_gateway_the_settings_and_the_snapshot() -> None:
    assert tuple(f.name for f in dataclasses.fields(Limits)) == LIMIT_FIELDS
    settings = {f.name for f in dataclasses.fields(GatewaySettings)}
    stats = {f.name for f in dataclasses.fields(GatewayStats)}
    assert set(LIMIT_FIELDS) <= stats
    # every limit has a flag (llmtop gateway --help); admission's TTFT budget starts as the SLO
    assert set(LIMIT_FIELDS) - {"ttft_slo_s"} <= settings
    assert "ttft_slo_s" not in settings
    assert "slo" in settings


def test_the_command_line_reads_the_table() -> None:
    assert {w: f for w, (f, _, _) in COMMANDS.items()} == {s.word: s.field for s in LIMITS}
    assert parse_command("rpm off") == {"rate_limit_rpm": None}
    assert parse_command("timeout 2.5") == {"queue_timeout_s": 2.5}


@pytest.mark.parametrize(
    ("changes", "field", "text"),
    [
        (
            {"max_concurrency": 0},
            "max_concurrency",
            "max_concurrency must be an integer >= 1, got 0",
        ),
        ({"max_queue": True}, "max_queue", "max_queue must be an integer >= 0, got True"),
        ({"queue_timeout_s": 0}, "queue_timeout_s", "queue_timeout_s must be a number > 0, got 0"),
        ({"rate_limit_rpm": float("nan")}, "rate_limit_rpm", "must be a number > 0 or null"),
        ({"max_inflight_prompt_tokens": 10**400}, "max_inflight_prompt_tokens", None),
        ({"cap": 4}, "cap", "unknown limit 'cap'"),
    ],
)
def test_a_bad_change_names_its_field(
    changes: dict[str, object], field: str, text: str | None
) -> None:
    if field == "max_inflight_prompt_tokens":
        assert check_changes(changes) == changes  # a huge int is still an int
        return
    with pytest.raises(LimitError) as e:
        check_changes(changes)
    assert e.value.field == field
    assert isinstance(e.value, UsageError)
    assert text is not None
    assert text in str(e.value)


def test_spec_by_field_or_word() -> None:
    assert limit_spec("cap") == limit_spec("max_concurrency")
    assert limit_spec("nope") is None


async def test_the_gateway_produces_the_typed_documents() -> None:
    """What /admin/stats, /admin/limits and /admin/events answer is what the types declare."""
    import httpx

    from llmtop.core.base.admin_api import EventDoc, LimitsDoc, StatsDoc
    from llmtop.gateway.server.app import create_app

    app = create_app(GatewaySettings(upstream="http://127.0.0.1:9"))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as c:
        await c.patch("/admin/limits", json={"max_concurrency": 4})
        stats = (await c.get("/admin/stats")).json()
        limits = (await c.get("/admin/limits")).json()
        events = (await c.get("/admin/events")).json()["events"]
    assert set(stats) == set(StatsDoc.__annotations__)
    assert set(limits) == set(LimitsDoc.__annotations__) == set(LIMIT_FIELDS)
    assert set(stats["limits"]) == set(LIMIT_FIELDS)
    assert [set(e) for e in events] == [set(EventDoc.__annotations__)]
