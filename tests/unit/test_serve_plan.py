"""`llmtop serve`'s arithmetic on the published configs of well-known models."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmtop.errors import UsageError
from llmtop.serve.inputs import device_memory, read_model, weights
from llmtop.serve.plan import (
    GIB,
    EngineArgs,
    Memory,
    ModelShape,
    Weights,
    make_plan,
    parse_engine_args,
)

MODELS = Path(__file__).parents[1] / "fixtures" / "models"


def shape(name: str) -> ModelShape:
    return read_model(str(MODELS / name))[0]


def gpu(gib: float) -> Memory:
    return Memory("gpu", int(gib * GIB), "test")


def plan(name: str, memory: Memory, engine: EngineArgs | None = None, **kw: int):  # type: ignore[no-untyped-def]
    s = shape(name)
    return make_plan(
        s,
        engine or EngineArgs(),
        memory,
        Weights(s.estimated_params() * 2, "estimated"),
        expect_prompt_tokens=kw.get("prompt", 1000),
        expect_output_tokens=kw.get("output", 250),
        reserve_bytes=2 * GIB,
    )


@pytest.mark.parametrize(
    ("name", "kv_bytes_per_token", "published_params_b"),
    [
        # 2 x layers x KV heads x head dim x 2 B (bf16); parameter counts from the model cards
        ("llama-3.1-8b", 2 * 32 * 8 * 128 * 2, 8.03),
        ("llama-3.1-70b", 2 * 80 * 8 * 128 * 2, 70.6),
        ("qwen2.5-7b", 2 * 28 * 4 * 128 * 2, 7.61),
        ("mistral-7b-v0.1", 2 * 32 * 8 * 128 * 2, 7.24),
    ],
)
def test_kv_bytes_per_token_and_weights(
    name: str, kv_bytes_per_token: int, published_params_b: float
) -> None:
    tp = 2 if name == "llama-3.1-70b" else 1  # an H200 holds the 7-8B models alone
    p = plan(name, gpu(141), EngineArgs(tensor_parallel_size=tp))
    assert p.kv_bytes_per_token == kv_bytes_per_token
    assert shape(name).estimated_params() / 1e9 == pytest.approx(published_params_b, rel=0.01)


def test_gqa_is_what_makes_llama3_8b_small() -> None:
    s = shape("llama-3.1-8b")
    assert s.kv_heads == 8
    assert s.attention_heads == 32
    # the same model read as if every query head had its own KV head holds 4x the bytes
    mha = ModelShape(**{**s.__dict__, "kv_heads": s.attention_heads})
    w = Weights(16 * GIB, "t")
    kw = {"expect_prompt_tokens": 1000, "expect_output_tokens": 250, "reserve_bytes": 2 * GIB}
    assert (
        make_plan(mha, EngineArgs(), gpu(80), w, **kw).kv_bytes_per_token
        == 4 * make_plan(s, EngineArgs(), gpu(80), w, **kw).kv_bytes_per_token
    )


def test_a_24_gib_gpu_bounds_max_model_len_by_the_kv_cache() -> None:
    p = plan("llama-3.1-8b", gpu(24))
    budget = int(24 * GIB * 0.92 - shape("llama-3.1-8b").estimated_params() * 2 - 2 * GIB)
    assert p.kv_budget_bytes == budget
    assert p.kv_blocks == budget // (131072 * 16)
    assert p.kv_tokens == p.kv_blocks * 16
    # the KV holds far fewer tokens than the 131,072 context: vLLM would refuse to start
    assert p.kv_tokens < 131072
    assert p.max_model_len == p.kv_tokens
    assert p.max_num_seqs == p.kv_tokens // 1250
    assert p.engine_flags == (
        "--max-model-len",
        str(p.kv_tokens),
        "--max-num-seqs",
        str(p.max_num_seqs),
    )
    text = "\n".join(p.lines)
    assert "2 (K,V) x 32 layers x 8 KV heads x 128 x 2 B (bfloat16) = 131,072 B" in text
    assert "// 1,250 per request" in text


def test_70b_does_not_fit_one_80_gib_gpu_but_fits_four() -> None:
    with pytest.raises(UsageError, match="does not fit"):
        plan("llama-3.1-70b", gpu(80))
    p = plan("llama-3.1-70b", gpu(80), EngineArgs(tensor_parallel_size=4))
    weights_b = shape("llama-3.1-70b").estimated_params() * 2
    assert p.kv_budget_bytes == int(4 * 80 * GIB * 0.92 - weights_b - 4 * 2 * GIB)


def test_mistral_sliding_window_caps_what_a_request_holds() -> None:
    s = shape("mistral-7b-v0.1")
    assert s.sliding_window == 4096
    p = plan("mistral-7b-v0.1", gpu(24), prompt=6000, output=1000)
    assert p.request_tokens == 4096
    assert p.max_num_seqs == p.kv_tokens // 4096
    assert p.max_model_len == 32768  # not bounded by the KV: the window is


def test_qwen_sliding_window_off_when_use_sliding_window_is_false() -> None:
    assert shape("qwen2.5-7b").sliding_window is None
    p = plan("qwen2.5-7b", gpu(80))
    assert p.max_model_len == 32768


def test_yours_win_and_are_not_repeated() -> None:
    engine = parse_engine_args(["--max-num-seqs=8", "--max-model-len", "4096", "--enforce-eager"])
    assert engine == EngineArgs(max_num_seqs=8, max_model_len=4096)
    p = plan("llama-3.1-8b", gpu(80), engine)
    assert p.engine_flags == ()
    assert (p.max_num_seqs, p.max_model_len) == (8, 4096)


def test_fp8_kv_cache_halves_the_bytes_and_block_size_counts() -> None:
    base = plan("llama-3.1-8b", gpu(80))
    fp8 = plan("llama-3.1-8b", gpu(80), EngineArgs(kv_cache_dtype="fp8", block_size=32))
    assert fp8.kv_bytes_per_token * 2 == base.kv_bytes_per_token
    assert fp8.block_size == 32
    assert fp8.kv_tokens % 32 == 0


def test_cpu_uses_vllm_kv_space_or_block_override() -> None:
    cpu = device_memory(None, read_gpus=list, environ={"VLLM_CPU_KVCACHE_SPACE": "1"})
    assert cpu.device == "cpu"
    assert cpu.cpu_kv_bytes == GIB
    p = plan("tiny-llama", cpu)
    per_token = 2 * 2 * 2 * 64 * 2
    assert p.kv_bytes_per_token == per_token
    assert p.block_size == 128  # vLLM's CPU default
    assert p.kv_blocks == GIB // (per_token * 128)
    blocks = plan(
        "tiny-llama",
        device_memory(None, read_gpus=list, environ={}),
        EngineArgs(num_gpu_blocks_override=32),
    )
    assert blocks.kv_tokens == 32 * 128
    assert blocks.max_num_seqs == 4096 // 1250
    assert blocks.max_model_len == 2048
    with pytest.raises(UsageError, match="VLLM_CPU_KVCACHE_SPACE"):
        plan("tiny-llama", device_memory(None, read_gpus=list, environ={}))


def test_a_request_larger_than_the_cache_is_refused() -> None:
    cpu = device_memory(None, read_gpus=list, environ={})
    with pytest.raises(UsageError, match="does not fit in the KV cache"):
        plan("tiny-llama", cpu, EngineArgs(num_gpu_blocks_override=4), prompt=900, output=100)


def test_nvml_gpu_and_weight_files(tmp_path: Path) -> None:
    mem = device_memory(None, read_gpus=lambda: [("NVIDIA H200", 141 * GIB)], environ={})
    assert (mem.device, mem.total_bytes, mem.source) == ("gpu", 141 * GIB, "NVML: NVIDIA H200")
    (tmp_path / "config.json").write_text((MODELS / "tiny-llama" / "config.json").read_text())
    with (tmp_path / "model.safetensors").open("wb") as f:
        f.truncate(35_000_000)
    s, d = read_model(str(tmp_path))
    w = weights(s, d, "bfloat16")
    assert w.bytes == 35_000_000
    assert "1 weight file" in w.source


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no config.json"),
        ("{not json", "not a readable JSON"),
        (json.dumps({"hidden_size": 8}), "num_attention_heads"),
    ],
)
def test_bad_model_dirs_are_one_line_errors(
    tmp_path: Path, content: str | None, message: str
) -> None:
    if content is not None:
        (tmp_path / "config.json").write_text(content)
    with pytest.raises(UsageError, match=message):
        read_model(str(tmp_path))


def test_bad_vllm_flag_value() -> None:
    with pytest.raises(UsageError, match="--max-num-seqs"):
        parse_engine_args(["--max-num-seqs", "many"])
