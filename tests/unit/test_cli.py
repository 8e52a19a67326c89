"""The CLI contract: help, unknown commands, one-line errors, exit codes, settings precedence."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from llmtop import settings
from llmtop.cli import main
from llmtop.commands import NAMES
from llmtop.errors import ConfigError
from llmtop.recording.writer import Recorder
from llmtop.settings import GatewaySettings, MonitorSettings
from llmtop.sources.gateway import AdminClient


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "llmtop", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def test_help_lists_every_subcommand() -> None:
    out = run_cli("--help")
    assert out.returncode == 0
    for name in NAMES:
        assert f"\n    {name} " in out.stdout
    assert "Exit codes" in out.stdout


def test_subcommand_help_prints_defaults_and_env() -> None:
    out = run_cli("gateway", "--help")
    assert out.returncode == 0
    text = " ".join(out.stdout.split())
    assert "default: 8; env LLMTOP_MAX_CONCURRENCY" in text
    assert "env LLMTOP_QUEUE_TIMEOUT" in text


def test_unknown_command_is_one_line_exit_2() -> None:
    out = run_cli("bogus")
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1
    assert "invalid choice: 'bogus'" in out.stderr
    assert "Traceback" not in out.stderr


def test_bad_flag_value_is_one_line_exit_2() -> None:
    out = run_cli("gateway", "--max-queue", "many")
    assert out.returncode == 2
    assert out.stderr.strip().startswith("llmtop: argument --max-queue")
    assert out.stderr.count("\n") == 1


def test_unknown_flag_points_at_its_subcommands_help() -> None:
    out = run_cli("gateway", "--port", "9000")
    assert out.returncode == 2
    expected = "unrecognized arguments: --port 9000 (see 'llmtop gateway --help')"
    assert out.stderr == f"llmtop: {expected}\n"


def test_missing_config_file_is_one_line(tmp_path: Path) -> None:
    out = run_cli("snapshot", "--config", str(tmp_path / "nope.toml"), "--vllm", "http://x")
    assert out.returncode == 64  # snapshot: bad usage apart from its verdicts
    assert "config file not found" in out.stderr
    assert "Traceback" not in out.stderr


def test_bad_config_file_is_one_line(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text("[gateway\nmax_queue = 3\n")
    out = run_cli("gateway", "--config", str(cfg))
    assert out.returncode == 2
    assert out.stderr.startswith(f"llmtop: config file {cfg}")
    assert out.stderr.count("\n") == 1


def test_default_command_is_the_tui() -> None:
    from llmtop.cli import _with_default_command

    assert _with_default_command([]) == ["top"]
    assert _with_default_command(["--vllm", "http://h:8000"]) == ["top", "--vllm", "http://h:8000"]
    assert _with_default_command(["sim", "--port", "0"]) == ["sim", "--port", "0"]


def test_main_returns_exit_code_without_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["gateway", "--listen", "nonsense", "--max-concurrency", "1"])
    err = capsys.readouterr().err
    assert code in (2, 4)
    assert err.startswith("llmtop: ")
    assert "Traceback" not in err


def test_precedence_flags_env_config_defaults() -> None:
    config = {"gateway": {"max_queue": 10, "max_concurrency": 3, "queue_timeout_s": 7}}
    env = {"LLMTOP_MAX_QUEUE": "20", "LLMTOP_QUEUE_TIMEOUT": "9"}
    s = settings.load(
        GatewaySettings, flags={"max_queue": 30, "upstream": None}, config=config, environ=env
    )
    assert s.max_queue == 30  # flag beats env and config
    assert s.queue_timeout_s == 9.0  # env beats config
    assert s.max_concurrency == 3  # config beats default
    assert s.upstream == "http://127.0.0.1:8000"  # default


def test_env_values_are_coerced_and_checked() -> None:
    s = settings.load(
        MonitorSettings, environ={"LLMTOP_VLLM": "http://a:1, http://b:2", "LLMTOP_GATEWAY": "off"}
    )
    assert s.vllm_urls == ("http://a:1", "http://b:2")
    assert s.gateway_url is None
    with pytest.raises(ConfigError, match="LLMTOP_INTERVAL: expected a number"):
        settings.load(MonitorSettings, environ={"LLMTOP_INTERVAL": "fast"})


def test_unknown_config_key_is_named() -> None:
    with pytest.raises(ConfigError, match=r"unknown setting \[gateway\] max_qeue"):
        settings.load(GatewaySettings, config={"gateway": {"max_qeue": 1}}, environ={})


def test_token_file(tmp_path: Path) -> None:
    f = tmp_path / "tok"
    f.write_text("s3cret\n")
    assert settings.read_token(None, str(f)) == "s3cret"
    assert settings.read_token("env-token", None) == "env-token"
    with pytest.raises(ConfigError, match="admin token file"):
        settings.read_token(None, str(tmp_path / "missing"))


def test_the_token_file_is_read_once_when_the_settings_load(tmp_path: Path) -> None:
    """settings.load reads the file into admin_token; what is built from the settings after
    (the collector, the admin client, the recorder) never opens it again."""
    f = tmp_path / "tok"
    f.write_text("s3cret\n")
    s = settings.load(MonitorSettings, flags={"admin_token_file": str(f)}, environ={})
    assert (s.admin_token, s.admin_token_file) == ("s3cret", None)
    f.unlink()  # a second read would fail now
    assert settings.resolve_token(s) is s
    assert AdminClient.from_settings(s).headers["authorization"] == "Bearer s3cret"  # type: ignore[union-attr]
    assert not Recorder.from_settings(s).recording  # built without reading the file
    gateway = settings.load(GatewaySettings, environ={"LLMTOP_ADMIN_TOKEN": "env-token"})
    assert gateway.admin_token == "env-token"
    with pytest.raises(ConfigError, match="admin token file"):
        settings.load(MonitorSettings, flags={"admin_token_file": str(f)}, environ={})


def test_the_replica_label_is_a_monitor_flag_and_a_bad_one_is_one_line() -> None:
    for command in ("top", "snapshot"):
        out = run_cli(command, "--help")
        text = " ".join(out.stdout.split())
        assert "--replica-label NAME" in text
        assert "default: instance; env LLMTOP_PROMETHEUS_REPLICA_LABEL" in text
    s = settings.load(MonitorSettings, environ={"LLMTOP_PROMETHEUS_REPLICA_LABEL": "pod"})
    assert s.prometheus_replica_label == "pod"
    out = run_cli("snapshot", "--prometheus", "http://127.0.0.1:9", "--replica-label", "k8s-pod")
    assert out.returncode == 64
    assert out.stderr == "llmtop: --replica-label 'k8s-pod' is not a Prometheus label name\n"


def test_polling_commands_raise_the_gc_threshold_at_the_entry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`top` and `snapshot` poll every second for as long as they run: the entry raises the
    collector's young threshold for them (never lowers it); other commands leave it."""
    import gc
    import types

    from llmtop import cli

    seen: dict[str, int] = {}
    real = cli._module

    def fake(name: str) -> types.SimpleNamespace:
        mod = real(name)

        def run(args: object) -> int:
            seen[name] = gc.get_threshold()[0]
            return 0

        return types.SimpleNamespace(HELP=mod.HELP, add_arguments=mod.add_arguments, run=run)

    before = gc.get_threshold()
    monkeypatch.setattr(cli, "_module", fake)
    try:
        gc.set_threshold(700, *before[1:])
        assert main(["report", "x.jsonl"]) == 0
        assert seen["report"] == 700
        assert main(["snapshot"]) == 0
        assert seen["snapshot"] == cli.GC_GEN0_THRESHOLD
        gc.set_threshold(50_000, *before[1:])
        assert main(["top"]) == 0
        assert seen["top"] == 50_000  # raised only, never lowered
    finally:
        gc.set_threshold(*before)
