"""Write base/prometheusrule.yaml: `llmtop rules`' groups as a Prometheus Operator
PrometheusRule, so that the cluster alerts on exactly what the console judges by.

    python deploy/kubernetes/render_rules.py            # regenerate the committed file
    python deploy/kubernetes/render_rules.py --check    # exit 1, with a diff, if it is stale
    python deploy/kubernetes/render_rules.py --out F -- --vllm-selector '{job="vllm"}'

Arguments after `--` go to `llmtop rules` (selectors, the replica label, the SLO). The text is
`llmtop rules`' own, indented under `spec:`, never re-serialised: its comments and block
scalars stay as the generator wrote them, and the committed file is byte for byte what this
prints but for the llmtop version in its first header line (`comparable`), which changes with
every commit of a development install (tests/integration/test_deploy_manifests.py holds it to
that).
"""

from __future__ import annotations

import argparse
import difflib
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
TARGET = HERE / "base" / "prometheusrule.yaml"
NAME = "llmtop"

PREAMBLE = """\
# Made by deploy/kubernetes/render_rules.py from `llmtop rules`: regenerate it rather than edit
# it. What follows up to `apiVersion` is `llmtop rules`' own header.
"""


_VERSION = re.compile(r"^(# Made by `llmtop rules` \(llmtop )[^)\s]+(\))", re.MULTILINE)


def comparable(text: str) -> str:
    """`text` with the llmtop version that made it blanked: the one part of `llmtop rules`'
    output that says who made it, not what it says."""
    return _VERSION.sub(r"\1VERSION\2", text, count=1)


def rules_text(rules_args: list[str]) -> str:
    """`llmtop rules ARGS`' output, from this interpreter's llmtop."""
    done = subprocess.run(
        [sys.executable, "-m", "llmtop", "rules", *rules_args],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"render_rules: llmtop rules exited {done.returncode}: {done.stderr}")
    return done.stdout


def as_prometheus_rule(text: str, name: str = NAME) -> str:
    """The PrometheusRule around `llmtop rules`' text: its header comments first, then its
    `groups:` block indented two spaces under `spec:`."""
    lines = text.splitlines()
    try:
        start = lines.index("groups:")
    except ValueError:
        raise SystemExit("render_rules: no top-level `groups:` in llmtop rules' output") from None
    header, body = lines[:start], lines[start:]
    out = [PREAMBLE.rstrip("\n"), *header]
    out += [
        "apiVersion: monitoring.coreos.com/v1",
        "kind: PrometheusRule",
        "metadata:",
        f"  name: {name}",
        "spec:",
    ]
    out += [f"  {line}" if line else "" for line in body]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=TARGET, help=f"default: {TARGET}")
    parser.add_argument("--check", action="store_true", help="exit 1 if --out is not current")
    parser.add_argument("--print", action="store_true", help="print it instead of writing it")
    parser.add_argument("rules_args", nargs="*", help="after --: arguments of llmtop rules")
    args = parser.parse_args(argv)
    rendered = as_prometheus_rule(rules_text(args.rules_args))
    if args.print:
        sys.stdout.write(rendered)
        return 0
    if args.check:
        current = args.out.read_text(encoding="utf-8") if args.out.exists() else ""
        if comparable(current) == comparable(rendered):
            return 0
        diff = difflib.unified_diff(
            current.splitlines(keepends=True),
            rendered.splitlines(keepends=True),
            str(args.out),
            "llmtop rules now",
        )
        sys.stdout.writelines(diff)
        print(f"{args.out} is stale: run python deploy/kubernetes/render_rules.py", file=sys.stderr)
        return 1
    args.out.write_text(rendered, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
