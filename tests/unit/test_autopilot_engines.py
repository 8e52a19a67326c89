"""The autopilot names the engine it reads and how, from the engine's own dialect: SGLang's token
pool, TensorRT-LLM's KV cache without preemptions (stepped, not held for a count it never
exports), llama.cpp's and LMDeploy's slots (no KV capacity) with the TTFT the gateway measures."""

from __future__ import annotations

from llmtop.gateway.autopilot.autopilot import Autopilot
from llmtop.gateway.autopilot.drive import AUTO_MAX_CONCURRENCY, drive
from llmtop.gateway.autopilot.engines import (
    by_slots,
    engine_named,
    info_slots,
    reads,
    slots_in,
    without_preemptions,
)
from tests.support.admission import FakeClock, make
from tests.support.autopilot import sig


def test_each_engine_is_read_in_its_own_words() -> None:
    assert reads("sglang", by_slots=False) == (
        "KV budget from SGLang's token pool (sglang:token_usage of sglang:max_total_num_tokens)"
    )
    assert reads("vllm", by_slots=False).startswith("KV budget from vLLM's KV cache")
    trt = reads("trtllm", by_slots=False)
    assert "TensorRT-LLM's KV cache (trtllm_kv_cache_utilization" in trt
    assert "no preemption count (trtllm-serve counts no preemptions" in trt
    llama = reads("llamacpp", by_slots=True)
    assert "llama.cpp's slots (/props total_slots, else llamacpp:requests_processing while" in llama
    assert "the TTFT the gateway measures: llama.cpp has exported no KV usage" in llama
    assert "the engine's slots" in reads(None, by_slots=True)  # a dialect not found: no names


def test_the_kind_of_a_fleet_is_each_kind_once() -> None:
    assert engine_named({"sglang"}) == "sglang"
    assert engine_named({"vllm", "sglang", None}) == "sglang+vllm"
    assert engine_named({None}) is None


def test_an_engine_that_counts_no_preemptions_is_stepped_not_held() -> None:
    """TensorRT-LLM: KV utilisation and capacity, no preemption counter; the KV budget moves."""
    ctl = make(FakeClock(), max_concurrency=8, mode="auto")
    pilot = Autopilot()
    trt = sig(kv_capacity_blocks=256, preemptions=None, kv_usage_frac=0.3, running=4.0)
    assert without_preemptions("trtllm", trt).preemptions == 0.0
    assert without_preemptions("vllm", trt).preemptions is None  # vLLM's is only not read yet
    drive(ctl, pilot, trt, 0.0, engine="trtllm")
    assert ctl.limits.max_inflight_kv_blocks == 256
    assert "read from TensorRT-LLM's KV cache" in pilot.last_reason
    drive(ctl, pilot, trt, 1.0, engine="trtllm")
    assert "unknown" not in pilot.last_reason
    assert ctl.autopilot is not None
    assert ctl.autopilot["engine"] == "trtllm"
    assert "no preemption count" in ctl.autopilot["reads"]


def test_an_engine_with_usage_but_no_capacity_is_capped_by_its_slots() -> None:
    """LMDeploy exports its KV use but not its capacity: no budget can be sized in blocks, so
    its slots cap admission, as llama.cpp's do."""
    ctl = make(FakeClock(), max_concurrency=AUTO_MAX_CONCURRENCY, mode="auto")
    pilot = Autopilot()
    lmdeploy = sig(kv_capacity_blocks=None, kv_block_size=None, kv_usage_frac=0.9, preemptions=None)
    drive(ctl, pilot, lmdeploy, 0.0, engine="lmdeploy")
    drive(ctl, pilot, sig(**{**lmdeploy.__dict__, "running": 4.0, "waiting": 3.0}), 1.0)
    assert ctl.limits.max_concurrency == 4
    assert ctl.limits.max_inflight_kv_blocks is None
    assert "admits by LMDeploy's 4 slots" in pilot.last_reason
    assert ctl.autopilot is not None
    assert ctl.autopilot["reads"].startswith("cap by LMDeploy's slots")


def test_a_frontend_with_capacity_but_no_kv_use_is_capped_by_its_slots() -> None:
    """Dynamo's bare frontend exports its workers' KV capacity but not their use: not held for
    the use forever, but capped by what it runs while requests queue in it."""
    ctl = make(FakeClock(), max_concurrency=8, mode="auto")
    pilot = Autopilot()
    front = sig(kv_capacity_blocks=256, kv_usage_frac=None, preemptions=None)
    assert by_slots("dynamo", front)
    assert not by_slots("vllm", front)  # vLLM's use missing for a scrape: the KV budget holds
    drive(ctl, pilot, front, 0.0, engine="dynamo")
    drive(ctl, pilot, sig(**{**front.__dict__, "running": 6.0, "waiting": 2.0}), 1.0)
    assert ctl.limits.max_concurrency == 6
    assert ctl.limits.max_inflight_kv_blocks is None
    assert ctl.autopilot is not None
    assert "Dynamo's frontend exports no KV usage" in ctl.autopilot["reads"]


def test_the_slots_llama_server_says_are_taken_at_once() -> None:
    """llama-server's /props says its slots (`total_slots`, its -np): the cap is set there at
    the first scrape, with nothing lifted or learned; a JSON without a whole count says none."""
    assert info_slots("llamacpp") == ("/props", "total_slots")
    assert info_slots("sglang") is None
    assert slots_in({"total_slots": 4}, "total_slots") == 4
    bad: list[object] = [{"total_slots": 0}, {"total_slots": True}, {"total_slots": "4"}, [], None]
    for body in bad:
        assert slots_in(body, "total_slots") is None
    ctl = make(FakeClock(), max_concurrency=8, mode="auto")
    pilot = Autopilot()
    idle = sig(kv_capacity_blocks=None, kv_usage_frac=None, preemptions=None, running=0.0)
    drive(ctl, pilot, idle, 0.0, engine="llamacpp", slots_told=4)
    assert ctl.limits.max_concurrency == 4
    assert "admits by llama.cpp's 4 slots as its info endpoint says" in pilot.last_reason
