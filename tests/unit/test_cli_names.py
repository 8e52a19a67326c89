"""One name per meaning on the command line: the engine's URL is --vllm everywhere, a flag in
seconds says so (-s), `report --json` as elsewhere; every old spelling still works, with one
line on stderr naming the new one. And `snapshot` tells a usage error from its verdicts."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from llmtop import cli, settings

RENAMED = [
    # (command, old args, new args)
    ("gateway", ["--upstream", "http://e:8000"], ["--vllm", "http://e:8000"]),
    ("gateway", ["--queue-timeout", "7"], ["--queue-timeout-s", "7"]),
    ("gateway", ["--ttft-slo", "3"], ["--ttft-slo-s", "3"]),
    ("top", ["--interval", "2"], ["--interval-s", "2"]),
    ("top", ["--prometheus-window", "30"], ["--prometheus-window-s", "30"]),
    ("snapshot", ["--window", "3"], ["--window-s", "3"]),
    ("snapshot", ["--interval", "0.5"], ["--interval-s", "0.5"]),
    ("whatif", ["--vllm", "u", "--window", "9"], ["--vllm", "u", "--window-s", "9"]),
    ("whatif", ["--vllm", "u", "--interval", "2"], ["--vllm", "u", "--interval-s", "2"]),
    ("whatif", ["--vllm", "u", "--horizon", "20"], ["--vllm", "u", "--horizon-s", "20"]),
    ("whatif", ["--vllm", "u", "--queue-timeout", "4"], ["--vllm", "u", "--queue-timeout-s", "4"]),
    ("rules", ["--interval", "30"], ["--interval-s", "30"]),
    ("demo", ["--duration", "5"], ["--duration-s", "5"]),
    ("load", ["--url", "u", "--duration", "5"], ["--url", "u", "--duration-s", "5"]),
    ("report", ["f", "--format", "json"], ["f", "--json"]),
]


def parse(command: str, args: list[str]) -> argparse.Namespace:
    return cli.build_parser(command).parse_args([command, *args])


@pytest.mark.parametrize(("command", "old", "new"), RENAMED)
def test_an_old_spelling_sets_what_the_new_one_sets_and_says_so_once(
    command: str,
    old: list[str],
    new: list[str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(settings, "_warned", set())
    want = vars(parse(command, new))
    assert capsys.readouterr().err == ""
    got = vars(parse(command, old))
    if command == "report":  # --format json is --json: the same report
        assert got.pop("format") == "json"
        assert want.pop("format") is None
        got["json"] = True
    assert got == want
    old_flag = next(a for a in old if a.startswith("--") and a not in new)
    new_flag = next(a for a in new if a.startswith("--") and a not in old)
    assert capsys.readouterr().err == f"llmtop: {old_flag} is deprecated; use {new_flag}\n"


def test_the_gateways_old_upstream_flag_still_repeats(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(settings, "_warned", set())
    args = parse("gateway", ["--upstream", "http://a", "--vllm", "http://b", "--upstream", "c"])
    assert args.upstream == ["http://a", "http://b", "c"]


def test_serve_takes_the_old_ready_timeout_anywhere_among_vllms_flags(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from llmtop.commands.serve import own_flags

    monkeypatch.setattr(settings, "_warned", set())
    own = own_flags(argparse.ArgumentParser(add_help=False))  # as `serve` parses them
    late, rest = own.parse_known_args(["--dtype", "half", "--ready-timeout", "9"])
    assert (vars(late), rest) == ({"ready_timeout": 9.0}, ["--dtype", "half"])
    assert "--ready-timeout is deprecated; use --ready-timeout-s" in capsys.readouterr().err
    late, _ = own.parse_known_args(["--dtype", "half"])
    assert vars(late) == {}  # not given: the plan's default, not None


def test_help_shows_only_the_new_names() -> None:
    for command, old, new in RENAMED:
        shown = cli._subparser(cli.build_parser(command), command).format_help()
        old_flag = next(a for a in old if a.startswith("--") and a not in new)
        new_flag = next(a for a in new if a.startswith("--") and a not in old)
        assert f"{old_flag} " not in shown.replace(new_flag, "")
        assert new_flag in shown


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
