"""The field guide's families read from real 0.32 payloads with the families vLLM's source
defines appended (spec decode, LoRA, NIXL, KV offload, sleep, health, corrupted): each None
when not exported, bad input read as unknown and said, a restart an event, never a crash."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmtop.core.base.raw import RawEngine, RawPoll
from llmtop.core.exposition import promtext
from llmtop.core.pipeline.pipeline import Pipeline
from llmtop.core.vllm import reader
from llmtop.core.vllm.names import sample_names
from llmtop.core.vllm.scrape import EngineScrape
from llmtop.settings import HealthSettings

KEEP = promtext.keep_names(sample_names())
URL = "http://e"
L = 'engine="0",model_name="tinyllm"'


def spec(drafts: float, proposed: float, accepted: float, per_pos: tuple[float, ...]) -> str:
    """vllm/v1/spec_decode/metrics.py's counters, as exposed."""
    lines = [
        f"vllm:spec_decode_num_drafts_total{{{L}}} {drafts}",
        f"vllm:spec_decode_num_draft_tokens_total{{{L}}} {proposed}",
        f"vllm:spec_decode_num_accepted_tokens_total{{{L}}} {accepted}",
    ]
    lines += [
        f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{L},position="{i}"}} {v}'
        for i, v in enumerate(per_pos)
    ]
    return "\n".join(lines) + "\n"


def lora(*series: tuple[str, str, str, float]) -> str:
    """vllm:lora_requests_info series: (max_lora, running, waiting, wall-clock value)."""
    return "".join(
        f'vllm:lora_requests_info{{max_lora="{m}",running_lora_adapters="{r}",'
        f'waiting_lora_adapters="{w}"}} {v}\n'
        for m, r, w, v in series
    )


def scrape(text: str) -> EngineScrape:
    return reader.extract(tuple(promtext.parse(text, KEEP)))


@pytest.fixture
def load(fixtures_dir: Path) -> str:
    return (fixtures_dir / "metrics-load.txt").read_text()


def test_a_plain_032_scrape_reads_no_family_it_does_not_export(load: str) -> None:
    s = scrape(load)
    assert s.labelled_families is not None
    assert s.labelled_families.sleep_state == "awake"  # 0.32 always exports the sleep state
    assert s.labelled_families.lora is None
    assert s.labelled_families.healthy is None  # not in 0.32's source
    assert s.labelled_families.cached_by_source["device"] == 1792.0
    assert "spec_drafts" not in s.counters
    assert s.counter_keys is not None  # kept on its plan: no labelled counter was added
    p = Pipeline(HealthSettings())
    p.update(RawPoll(0.0, (RawEngine(URL, tuple(promtext.parse(load, KEEP))),)))
    e = p.update(RawPoll(1.0, (RawEngine(URL, tuple(promtext.parse(load, KEEP))),))).engines[0]
    assert e.spec_acceptance_frac is None  # not exported: unknown, never 0
    assert e.spec_acceptance_by_pos == ()
    assert e.lora is None
    assert e.kv_transfer_failures_per_s is None
    assert e.kv_transfer_bytes_per_s is None
    assert e.corrupted_per_s is None
    assert e.sleep_state == "awake"


def test_spec_decode_acceptance_over_the_window(load: str) -> None:
    p = Pipeline(HealthSettings())
    p.update(RawPoll(0.0, (RawEngine(URL, promtext.parse(load + spec(0, 0, 0, (0, 0, 0)), KEEP)),)))
    later = load + spec(100, 300, 150, (80, 50, 20))
    e = p.update(RawPoll(2.0, (RawEngine(URL, promtext.parse(later, KEEP)),))).engines[0]
    assert e.spec_acceptance_frac == pytest.approx(0.5)
    assert e.spec_mean_accepted_len == pytest.approx(2.5)
    assert e.spec_acceptance_by_pos == pytest.approx((0.8, 0.5, 0.2))
    assert e.spec_drafts_per_s == pytest.approx(50.0)


def test_lora_info_takes_the_newest_series_and_says_what_it_cannot_read(load: str) -> None:
    s = scrape(load + lora(("1", "a", "", 100.0), ("1", "a", "b,c", 200.0)))
    found = s.labelled_families.lora if s.labelled_families else None
    assert found is not None
    assert (found.max_loras, found.running, found.waiting) == (1, ("a",), ("b", "c"))
    bad = scrape(load + lora(("many", "a", "", 5.0)))
    assert bad.labelled_families is not None
    assert bad.labelled_families.lora is not None
    assert bad.labelled_families.lora.max_loras is None  # unknown, not 0
    assert "max_lora 'many' is not a number" in bad.labelled_families.unread[0]


def test_nan_inf_and_unknown_labels_read_as_unknown(load: str) -> None:
    odd = (
        load.replace(
            'vllm:engine_sleep_state{engine="0",model_name="tinyllm",sleep_state="awake"} 1.0',
            'vllm:engine_sleep_state{engine="0",model_name="tinyllm",sleep_state="awake"} NaN',
        )
        + f'vllm:engine_sleep_state{{{L},sleep_state="hibernating"}} 1.0\n'
        + f"vllm:engine_healthy{{{L}}} +Inf\n"
    )
    f = scrape(odd).labelled_families
    assert f is not None
    assert f.sleep_state is None  # awake unread, no level set: unknown, not awake
    assert f.healthy is None  # Inf is not a health
    assert any("unknown sleep_state 'hibernating'" in u for u in f.unread)
    assert any("engine_healthy is inf" in u for u in f.unread)
    assert any("is nan" in u for u in f.unread)


def test_an_asleep_engine_and_an_unhealthy_one(load: str) -> None:
    asleep = load.replace('sleep_state="awake"} 1.0', 'sleep_state="awake"} 0.0').replace(
        'sleep_state="weights_offloaded"} 0.0', 'sleep_state="weights_offloaded"} 1.0'
    )
    f = scrape(asleep + f"vllm:engine_healthy{{{L}}} 0\n").labelled_families
    assert f is not None
    assert f.sleep_state == "weights_offloaded"
    assert f.healthy is False


def test_kv_transfer_rates_and_failures(load: str) -> None:
    def nixl(failed: float, moved: float, xfer_s: float, n: float) -> str:
        return (
            f"vllm:nixl_num_failed_transfers_total{{{L}}} {failed}\n"
            f'vllm:nixl_bytes_transferred_bucket{{{L},le="+Inf"}} {n}\n'
            f"vllm:nixl_bytes_transferred_sum{{{L}}} {moved}\n"
            f"vllm:nixl_bytes_transferred_count{{{L}}} {n}\n"
            f'vllm:nixl_xfer_time_seconds_bucket{{{L},le="+Inf"}} {n}\n'
            f"vllm:nixl_xfer_time_seconds_sum{{{L}}} {xfer_s}\n"
            f"vllm:nixl_xfer_time_seconds_count{{{L}}} {n}\n"
        )

    p = Pipeline(HealthSettings())
    p.update(RawPoll(0.0, (RawEngine(URL, promtext.parse(load + nixl(0, 0, 0, 0), KEEP)),)))
    text = load + nixl(4, 8e9, 1.0, 20)
    e = p.update(RawPoll(2.0, (RawEngine(URL, promtext.parse(text, KEEP)),))).engines[0]
    assert e.kv_transfer_failures_per_s == pytest.approx(2.0)
    assert e.kv_transfer_bytes_per_s == pytest.approx(4e9)
    assert e.kv_transfer_time_mean_s == pytest.approx(0.05)


def test_a_restart_is_seen_and_no_rate_goes_negative(load: str, fixtures_dir: Path) -> None:
    idle = (fixtures_dir / "metrics-idle.txt").read_text()
    p = Pipeline(HealthSettings())
    p.update(RawPoll(0.0, (RawEngine(URL, promtext.parse(load, KEEP)),)))
    snap = p.update(RawPoll(1.0, (RawEngine(URL, promtext.parse(idle, KEEP)),)))  # went back
    e = snap.engines[0]
    assert e.restarted_at == 1.0
    for rate in (e.prompt_tok_per_s, e.decode_tok_per_s, e.preemptions_per_s):
        assert rate is not None
        assert rate >= 0
    assert [f.id for f in snap.findings] == ["engine-restarted"]
    assert snap.findings[0].severity == "info"
    assert "findings over a window wait 10 s more" in snap.findings[0].summary


def test_dcgm_xid_and_ecc_are_read_and_nan_is_unknown() -> None:
    from llmtop.sources.gpu.dcgm import DCGM_KEEP, parse_dcgm

    text = (
        'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="a",modelName="H100"} 90\n'
        'DCGM_FI_DEV_XID_ERRORS{gpu="0",UUID="a",modelName="H100"} 79\n'
        'DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{gpu="0",UUID="a",modelName="H100"} 2\n'
        'DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="b",modelName="H100"} 91\n'
        'DCGM_FI_DEV_XID_ERRORS{gpu="1",UUID="b",modelName="H100"} NaN\n'
        'DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS{gpu="1",UUID="b",modelName="H100"} 3\n'
    )
    first, second = parse_dcgm(promtext.parse(text, DCGM_KEEP))
    assert (first.xid_last, first.ecc_uncorrectable) == (79, 2.0)
    assert second.xid_last is None  # NaN: unknown, not "no XID"
    assert (second.ecc_uncorrectable, second.ecc_correctable) == (None, 3.0)
