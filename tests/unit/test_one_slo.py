"""One SLO (issue 28.4): one [slo] section, one flag and one variable each, the same everywhere.

Every command that judges latency shows the same flags, default and variable in --help; one
change of the setting moves the health rule, the gateway's deadline, load's goodput and the
rules file together; an old name ([health] ttft_slo_s) is an error that names it.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import httpx
import pytest

from llmtop import settings
from llmtop.cli import main
from llmtop.commands import NAMES
from llmtop.commands._common import load
from llmtop.core.alerts.spec import AlertSpec
from llmtop.core.findings.catalog import HealthState
from llmtop.core.health.rulebase import Context
from llmtop.core.output.rulesfile import render
from llmtop.errors import ConfigError
from llmtop.gateway.server.app import create_app
from llmtop.gateway.server.autopilot_loop import attach
from llmtop.gateway.server.context import GatewayContext, limits_of
from llmtop.load.session import LoadOptions
from llmtop.load.stats import RequestResult, Slo, verdict
from llmtop.settings import GatewaySettings, HealthSettings, SloSettings
from tests.support.health import healthy

JUDGES = tuple(n for n in NAMES if n != "sim")
"""Every command but the sim judges by the SLO (the sim only serves)."""
SHOWN = {
    "--ttft-slo-s": "(default: 2.0; env LLMTOP_TTFT_SLO_S; config [slo] ttft_s)",
    "--itl-slo-s": "(default: 0.1; env LLMTOP_ITL_SLO_S; config [slo] itl_s)",
}


def help_of(command: str, capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as done:
        main([command, "--help"])
    assert done.value.code == 0
    return " ".join(capsys.readouterr().out.split())  # argparse's wrapping undone


@pytest.mark.parametrize("command", NAMES)
def test_every_command_shows_the_same_slo_flags_default_and_variable(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    text = help_of(command, capsys)
    for flag, shown in SHOWN.items():
        if command in JUDGES:
            assert re.search(rf"{flag} S [^-]*{re.escape(shown)}", text), (command, flag)
        else:
            assert flag not in text


def the_judges(slo_s: float) -> dict[str, object]:
    """What each judge makes of the same figures once the settings are loaded as a command
    loads them: a TTFT p95 of 3 s, a request answered in 3 s, the gateway's deadline."""
    args = argparse.Namespace(config=None)
    health, gateway = load(HealthSettings, args), load(GatewaySettings, args)
    state, found = HealthState(health), set()
    for t in range(5):  # past the rule's hold
        ctx = Context(time=float(t), engines=(healthy(ttft_p95_s=3.0),), gateway=None, gpus=(),
                      settings=health)  # fmt: skip
        found = {f.id for f in state.evaluate(ctx)}
    opts = LoadOptions(url="http://x", slo_settings=load(SloSettings, args))
    answered = RequestResult(0.0, "ok", status=200, ttft_s=3.0, e2e_s=4.0, itl_s=(0.05,) * 9)
    auto = GatewaySettings(slo=gateway.slo, autopilot=True)
    ctl = create_app(auto).state.gateway.admission
    return {
        "degraded": "degraded-200" in found,
        "load": verdict(answered, opts.goodput_slo()),
        "deadline": limits_of(auto).ttft_slo_s,
        "autopilot": attach(GatewayContext(auto, ctl, None)).config.ttft_slo_s,
        "rules": f"llmtop:vllm_ttft_p95_seconds > {slo_s:g}" in render(AlertSpec(health=health)),
    }


@pytest.mark.parametrize("how", ["env", "config"])
def test_one_setting_moves_the_rule_the_deadline_goodput_and_the_rules_file_together(
    how: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.delenv("LLMTOP_TTFT_SLO_S", raising=False)
    assert the_judges(2.0) == {
        "degraded": True, "load": False, "deadline": 2.0, "autopilot": 2.0, "rules": True,
    }  # fmt: skip
    if how == "env":
        monkeypatch.setenv("LLMTOP_TTFT_SLO_S", "3.5")
    else:
        (tmp_path / "llmtop").mkdir()
        (tmp_path / "llmtop" / "config.toml").write_text("[slo]\nttft_s = 3.5\n")
    assert the_judges(3.5) == {
        "degraded": False, "load": True, "deadline": 3.5, "autopilot": 3.5, "rules": True,
    }  # fmt: skip


async def test_the_gateway_shows_its_deadline_and_the_overrides_as_admissions() -> None:
    s = GatewaySettings(
        slo=SloSettings(ttft_s=3.0), autopilot=True, tenant_ttft_slo_s=(("batch", 60.0),)
    )
    app = create_app(s)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://gw") as c:
        before = (await c.get("/admin/stats")).json()["slo"]
        r = await c.patch("/admin/limits", json={"ttft_slo_s": 5.0})
        assert r.status_code == 200
        after = (await c.get("/admin/stats")).json()["slo"]
    assert before == {
        "ttft_s": 3.0, "itl_s": 0.1, "admission_ttft_s": 3.0, "engine_ttft_s": 0.0,
        "queue_budget_s": 3.0, "tenant_ttft_s": {"batch": 60.0},
    }  # fmt: skip
    assert after["ttft_s"] == 3.0  # the SLO stays; admission alone works to the override
    assert after["admission_ttft_s"] == after["queue_budget_s"] == 5.0


def test_an_old_config_key_is_an_error_naming_it(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text("[health]\nttft_slo_s = 3.5\n")
    config = settings.read_config(cfg)
    with pytest.raises(ConfigError, match=r"unknown setting \[health\] ttft_slo_s"):
        settings.load(HealthSettings, config=config, environ={})


def test_load_adds_its_own_e2e_bound_to_the_slo() -> None:
    assert LoadOptions(url="http://x").goodput_slo() == Slo(2.0, 0.1, None)
    assert LoadOptions(url="http://x", e2e_slo_s=30.0).goodput_slo().e2e_s == 30.0


@pytest.mark.parametrize(
    ("given", "message"),
    [
        (["--ttft-slo-s", "0"], "--ttft-slo-s: expected a number of seconds > 0, got 0.0"),
        (["--itl-slo-s", "inf"], "--itl-slo-s: expected a number of seconds > 0, got inf"),
    ],
)
def test_a_bad_slo_is_one_line_naming_the_flag(
    given: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["rules", *given]) != 0
    assert capsys.readouterr().err.strip() == f"llmtop: {message}"


def test_the_gateway_panel_names_the_deadline_and_every_override() -> None:
    from llmtop.core.base.snapshot import GatewayStats
    from llmtop.tui.view.present import deadline_text

    def line(slo: float = 2.0, **kw: object) -> tuple[str, list[str]]:
        given: dict[str, object] = {"slo_ttft_s": 2.0, "ttft_slo_s": 2.0, **kw}
        g = GatewayStats("http://gw", True, **given)  # type: ignore[arg-type]
        pieces = deadline_text(g, slo)
        return "".join(t for t, _ in pieces), [t.strip() for t, look in pieces if look]

    assert line() == ("", [])  # fifo, the same SLO: nothing to say
    assert line(queue_budget_s=1.6, engine_ttft_s=0.4) == (
        "slo 2.00s  wait ≤1.60s (engine 400ms)",
        [],
    )
    assert line(1.5, queue_budget_s=1.6, engine_ttft_s=0.4)[1] == ["≠ 1.50s here"]
    assert line(ttft_slo_s=3.0)[1] == ["admission 3.00s (override)"]
    assert line(tenant_ttft_slo_s=(("batch", 60.0),))[0] == "slo 2.00s  1 tenant override"
