"""`llmtop serve --dry-run`: the arithmetic and the commands, nothing started."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmtop.cli import main

MODELS = Path(__file__).parents[1] / "fixtures" / "models"


def test_dry_run_prints_the_arithmetic_and_commands(capsys: pytest.CaptureFixture[str]) -> None:
    model = str(MODELS / "llama-3.1-8b")
    code = main(
        [
            "serve",
            model,
            "--gpu-memory-gb",
            "24",
            "--dry-run",
            "--enforce-eager",
            "--expect-prompt-tokens",
            "2000",
            "--expect-output-tokens",
            "500",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "KV per token 2 (K,V) x 32 layers x 8 KV heads x 128 x 2 B (bfloat16) = 131,072 B" in out
    assert "2,000 prompt + 500 output = 2,500 tokens" in out
    engine = next(line for line in out.splitlines() if line.startswith("engine "))
    # the plan's flags, then the user's own; llmtop's own flags are not passed to vLLM
    assert "--max-model-len" in engine
    assert "--max-num-seqs" in engine
    assert engine.endswith("--enforce-eager")
    assert "--dry-run" not in engine
    assert "--expect-prompt-tokens" not in engine
    gateway = next(line for line in out.splitlines() if line.startswith("gateway  "))
    seqs = engine.split("--max-num-seqs ")[1].split()[0]
    assert f"--max-concurrency {seqs}" in gateway


def test_a_missing_model_dir_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["serve", "--dry-run", str(tmp_path / "nope")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1
    assert "no config.json" in err


def test_no_gpu_and_no_cpu_kv_space_says_what_to_pass(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    monkeypatch.setattr("llmtop.serve.inputs._nvml_gpus", list)
    code = main(["serve", "--dry-run", str(MODELS / "tiny-llama")])
    assert code == 2
    assert "--gpu-memory-gb" in capsys.readouterr().err
