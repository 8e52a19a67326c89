"""vLLM's waiting reasons and prefix-cache share on the panels an on-call engineer reads:
shown when vLLM reports them, left off (no layout change) when it does not."""

from __future__ import annotations

from typing import Any

from tests.support.tui import OneSnapshot, make_app, panel_text


async def panel_texts(**engine: Any) -> tuple[str, str]:
    app = make_app(OneSnapshot(**engine), history=[])
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.pause(0.3)
        kv = panel_text(app, "#kv")
        seqs = panel_text(app, "#sequences")
        await pilot.press("q")
    return kv, seqs


async def test_deferred_waiting_and_prompt_cache_share_are_shown() -> None:
    kv, seqs = await panel_texts(waiting_deferred=3.0, prompt_cache_hit_frac=0.37)
    assert "(3 deferred)" in seqs
    assert "cached 37%" in kv


async def test_a_collapsed_prefix_cache_still_shows_its_zero() -> None:
    kv, _ = await panel_texts(prompt_cache_hit_frac=None, prefix_cache_hit_frac=0.0)
    assert "cached 0%" in kv  # looked up, nothing hit: the collapse itself


async def test_nothing_added_when_vllm_does_not_report_them() -> None:
    kv, seqs = await panel_texts(
        waiting_deferred=0.0, prompt_cache_hit_frac=None, prefix_cache_hit_frac=None
    )
    assert "deferred" not in seqs
    assert "cached" not in kv
