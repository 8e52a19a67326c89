"""The field guide's rows at 80x24: spec decode on the throughput panel, LoRA slots on the
sequences panel, KV transfer on the KV panel, asleep / restarted in the header; each only when
the engine exports it, and every panel's numbers still on the screen."""

from __future__ import annotations

from llmtop.core.base.snapshot import LoraAdapters
from tests.support.tui import OneSnapshot, make_app, panel_text

PANELS = ("#kv", "#sequences", "#latency", "#gateway", "#throughput", "#gpu")


async def _shown(source: OneSnapshot) -> dict[str, str]:
    app = make_app(source, history=[])
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause(0.3)
        out = {name: panel_text(app, name) for name in PANELS}
        out["#header"] = str(app.query_one("#header").render().plain)  # type: ignore[union-attr]
        for name in PANELS:  # the whole panel inside the 24 lines: nothing pushed off
            region = app.query_one(name).region
            assert region.bottom <= 24, (name, region)
        await pilot.press("q")
    return out


async def test_the_new_rows_show_when_exported_and_keep_every_panel_on_screen() -> None:
    now = OneSnapshot().snapshot.time
    source = OneSnapshot(
        spec_acceptance_frac=0.62,
        spec_mean_accepted_len=2.86,
        spec_acceptance_by_pos=(0.9, 0.6, 0.36),
        lora=LoraAdapters(max_loras=1, running=("a",), waiting=("b", "c")),
        kv_transfer_bytes_per_s=4.1e9,
        kv_transfer_failures_per_s=2.0,
        sleep_state="weights_offloaded",
        restarted_at=now - 12,
    )
    shown = await _shown(source)
    assert "spec acc 62%  2.9 tok/step 90/60/36%" in shown["#throughput"]
    assert "per seq" in shown["#throughput"]  # the panel's own numbers stay
    assert "lora 1/1 +2" in shown["#sequences"]
    assert "xfer 4.10 GB/s  failed 2.0/s" in shown["#kv"]
    assert "capacity" in shown["#kv"]
    assert "ASLEEP" in shown["#header"]
    assert "RESTARTED 12s" in shown["#header"]


async def test_nothing_is_added_when_the_families_are_not_exported() -> None:
    shown = await _shown(OneSnapshot())
    assert "spec" not in shown["#throughput"]
    assert "lora" not in shown["#sequences"]
    assert "xfer" not in shown["#kv"]
    assert "ASLEEP" not in shown["#header"]
    assert "RESTARTED" not in shown["#header"]
