"""One name per meaning on the command line: the engine's URL is --vllm everywhere, a flag in
seconds says so (-s), `report --json` as elsewhere, and each flag has one spelling. And
`snapshot` tells a usage error from its verdicts."""

from __future__ import annotations

import subprocess
import sys

import pytest

from llmtop import cli

OLD = [
    # (command, an old spelling, the arguments that make it parse otherwise)
    ("gateway", "--upstream", []),
    ("gateway", "--queue-timeout", []),
    ("gateway", "--ttft-slo", []),
    ("top", "--interval", []),
    ("top", "--prometheus-window", []),
    ("snapshot", "--window", []),
    ("snapshot", "--interval", []),
    ("whatif", "--window", ["--vllm", "u"]),
    ("whatif", "--interval", ["--vllm", "u"]),
    ("whatif", "--horizon", ["--vllm", "u"]),
    ("whatif", "--queue-timeout", ["--vllm", "u"]),
    ("rules", "--interval", []),
    ("rules", "--itl-slo", []),
    ("demo", "--duration", []),
    ("load", "--duration", ["--url", "u"]),
    ("load", "--slo", ["--url", "u"]),
    ("report", "--format", ["f"]),
]
"""Spellings no release shipped: each is a usage error now, not a prefix taken as a new flag."""


@pytest.mark.parametrize(("command", "old", "rest"), OLD)
def test_an_old_spelling_is_a_one_line_usage_error(
    command: str, old: str, rest: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as raised:
        cli.main([command, *rest, old, "1"])
    assert raised.value.code == (64 if command == "snapshot" else 2)
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"unrecognized arguments: {old} 1" in err


def test_serve_leaves_a_prefix_of_its_own_flags_to_vllm() -> None:
    from llmtop.commands.serve import own_flags

    own = own_flags()
    late, rest = own.parse_known_args(["--dtype", "half", "--ready-timeout-s", "9", "--no-tui"])
    assert (vars(late), rest) == ({"ready_timeout": 9.0, "no_tui": True}, ["--dtype", "half"])
    late, rest = own.parse_known_args(["--ready-timeout", "9"])
    assert (vars(late), rest) == ({}, ["--ready-timeout", "9"])


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "llmtop", *args], capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize(
    "args",
    [
        ["--bogus"],  # argparse's own error
        ["--window-s", "0"],  # the command's own check
        ["--interval-s", "fast"],  # a bad value
    ],
)
def test_snapshot_usage_error_is_64_not_a_verdict(args: list[str]) -> None:
    out = run_cli("snapshot", "--gateway", "off", *args)
    assert out.returncode == 64
    assert out.stderr.count("\n") == 1
    assert "Traceback" not in out.stderr


def test_snapshot_of_an_unreachable_engine_is_the_verdict_unknown() -> None:
    out = run_cli("snapshot", "--vllm", "http://127.0.0.1:9", "--gateway", "off", "--window-s", "1")
    assert out.returncode == 3
    assert "status UNKNOWN" in out.stdout


def test_other_commands_keep_2_for_bad_usage() -> None:
    assert run_cli("gateway", "--bogus").returncode == 2
    assert run_cli("whatif", "--vllm", "u", "--window-s", "0").returncode == 2
