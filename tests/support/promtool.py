"""promtool for the exposition checks: found on PATH, else installed once by
.ci/install-system-tools (Debian's prometheus package ships it); a test skips, naming why, only
when it cannot be had."""

from __future__ import annotations

import subprocess
from pathlib import Path

from harness.system_tools import system_binary


def promtool() -> str:
    """The promtool path, or skip the calling test with the reason it cannot be had."""
    return system_binary("promtool")


def _run(text: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool(), "check", "metrics"], input=text, capture_output=True, text=True, timeout=30
    )


def check_metrics(text: str) -> None:
    """Fail with promtool's own words unless `promtool check metrics` accepts the exposition."""
    done = _run(text)
    assert done.returncode == 0, f"promtool check metrics: {done.stdout}{done.stderr}"


LINT_EXIT = 3
"""promtool's exit status when the text parses but breaks a naming or help rule."""


def lint_findings(text: str) -> set[str]:
    """promtool's lint findings, one per line; fails on anything worse (a parse error)."""
    done = _run(text)
    out = (done.stdout + done.stderr).strip()
    assert done.returncode in (0, LINT_EXIT), f"promtool check metrics: {out}"
    return set(out.splitlines()) if done.returncode else set()


def check_vllm_metrics(text: str, real_capture: str) -> None:
    """As check_metrics, for an exposition that copies vLLM's names: it may break only the lint
    rules real vLLM breaks itself, the `vllm:` colon, and whatever promtool finds in
    `real_capture` (a real vLLM /metrics)."""
    real = lint_findings(real_capture)
    assert real, "the real capture was expected to show vLLM's own lint findings"
    left = {
        f
        for f in lint_findings(text) - real
        if not (f.startswith("vllm:") and f.endswith("metric names should not contain ':'"))
    }
    assert not left, "promtool check metrics, beyond vLLM's own naming: " + "; ".join(sorted(left))


def check_promql(exprs: dict[str, str], tmp: Path) -> None:
    """Fail with promtool's own words unless every expression parses as PromQL (each is written
    as a recording rule and checked with `promtool check rules`)."""
    import json

    rules = [{"record": f"llmtop:{name}", "expr": expr} for name, expr in exprs.items()]
    path = tmp / "rules.yml"
    path.write_text(json.dumps({"groups": [{"name": "llmtop", "rules": rules}]}))  # YAML ⊃ JSON
    done = subprocess.run(
        [promtool(), "check", "rules", str(path)], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, f"promtool check rules: {done.stdout}{done.stderr}"
