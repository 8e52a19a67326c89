"""`llmtop serve` stays vLLM's (issue 44 item 4): asked for another engine (`--engine-kind`, a
`--vllm-bin` that starts llama.cpp or SGLang, a GGUF model) it says so in one line and exits 2,
before any plan; LLMTOP_ENGINE_KIND naming another engine is noted and the vLLM it starts is read
as vLLM by its gateway and its TUI."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmtop.cli import main

MODEL = str(Path(__file__).parents[1] / "fixtures" / "models" / "llama-3.1-8b")
PLAN = ("--dry-run", "--gpu-memory-gb", "24")


def one_line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    code = main(["serve", *argv])
    out, err = capsys.readouterr()
    assert code == 2, err
    assert err.count("\n") == 1, err
    assert "Traceback" not in err
    assert "engine  " not in out  # no plan printed for an engine it does not start
    return err


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--engine-kind", "sglang", MODEL, *PLAN], "start SGLang yourself"),
        ([MODEL, *PLAN, "--engine-kind", "llamacpp"], "start llama.cpp yourself"),
        ([MODEL, *PLAN, "--engine-kind=trtllm"], "start TensorRT-LLM yourself"),
        (["--vllm-bin", "/opt/llama/llama-server", MODEL, *PLAN], "llama.cpp's llama-server"),
        ([MODEL, *PLAN, "--vllm-bin", "sglang"], "--vllm-bin sglang starts SGLang"),
    ],
    ids=["kind-before", "kind-after", "kind-equals", "bin-llama-server", "bin-sglang"],
)
def test_another_engine_asked_for_is_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], says: str
) -> None:
    err = one_line(capsys, argv)
    assert "llmtop serve starts vLLM only" in err
    assert "llmtop gateway --engine URL --autopilot" in err
    assert says in err


def test_an_unknown_kind_names_the_choices(capsys: pytest.CaptureFixture[str]) -> None:
    err = one_line(capsys, [MODEL, *PLAN, "--engine-kind", "sglangx"])
    assert "unknown engine kind 'sglangx': one of vllm, sglang" in err


def test_a_gguf_model_says_it_is_llama_cpps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(b"GGUF\x03\x00\x00\x00")
    for model in (gguf, tmp_path):  # the file, or a folder of them with no config.json
        err = one_line(capsys, [str(model), "--dry-run"])
        assert "a GGUF model (llama.cpp's format)" in err
        assert "llama-server --metrics" in err


def test_vllm_is_read_as_vllm_whatever_the_environment_says(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LLMTOP_ENGINE_KIND", "sglang")
    assert main(["serve", MODEL, *PLAN, "--engine-kind", "vllm"]) == 0
    out, err = capsys.readouterr()
    assert err == (
        "llmtop: LLMTOP_ENGINE_KIND=sglang not used here: llmtop serve starts vLLM and reads it"
        " as vLLM\n"
    )
    gateway = next(line for line in out.splitlines() if line.startswith("gateway  /"))
    assert gateway.endswith("--autopilot --engine-kind vllm")
    tui = next(line for line in out.splitlines() if line.startswith("tui  "))
    assert tui.endswith("--engine-kind vllm")
