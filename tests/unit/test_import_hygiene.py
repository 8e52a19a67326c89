"""The TUI's start-up path imports what the first frame needs and nothing more (issue 28.5).

`llmtop` builds its command line, then imports the TUI's wiring: what they import before the
first frame is what a person waits for (bench/bench_first_frame.py). The what-if, the help and
replica screens, the charts (plotext), the replay and report, a fleet's collector and
the parts of llmtop that never run in the TUI are imported when first used; the Pilot tests
(tests/tui/) open each of them, so they still load then. A fresh interpreter, as harlequin's
test_import_hygiene does: this process has imported everything already.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

START_UP = (
    "import argparse, sys; import llmtop.cli; from llmtop.commands import top;"
    " top.add_arguments(argparse.ArgumentParser()); import llmtop.tui.app, llmtop.tui.launch;"
    " print(' '.join(sorted(sys.modules)))"
)
"""What `llmtop --vllm URL` imports before it starts the app: the command line with `top`'s
flags (cli.py builds no other command's), commands/top.py, tui/launch.py."""
LATER = (
    "plotext",
    "textual_plotext",
    "matplotlib",
    "markdown_it",  # the help screen's Markdown
    "tomllib",  # only when there is a config file
    "prometheus_client",  # the parser of the exact path, for a scrape that needs it
    "llmtop.whatif.model",  # the feed (whatif.feed) is wired at start; the model when it runs
    "llmtop.whatif.collect",
    "llmtop.whatif.service",
    "llmtop.tui.screens.whatif",
    "llmtop.tui.screens.help",
    "llmtop.tui.screens.replica",
    "llmtop.tui.widgets.chart",
    "llmtop.tui.replay_app",
    "llmtop.recording.replay",
    "llmtop.recording.report",
    "llmtop.recording.charts",
    "llmtop.sources.fleet_collector",
    "llmtop.core.pipeline.fleet",
    "llmtop.core.promql",
    "llmtop.core.output.rulesfile",  # the findings build their alerts from core.alerts
    "llmtop.sim",
    "llmtop.gateway",
    "llmtop.load",
    "llmtop.demo",
    "aiohttp",
    "starlette",
    "uvicorn",
    "redis",
)
"""Imported when first used, never at start (a package and everything under it)."""

pytestmark = pytest.mark.xdist_group("import-hygiene")  # one start-up subprocess, not one a worker


@pytest.fixture(scope="module")
def started() -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", START_UP], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return set(done.stdout.split())


@pytest.mark.parametrize("package", LATER)
def test_the_start_up_path_does_not_import(package: str, started: set[str]) -> None:
    loaded = sorted(m for m in started if m == package or m.startswith(package + "."))
    assert loaded == [], f"imported at start: {', '.join(loaded)}"


def test_the_start_up_path_imports_what_the_first_frame_needs(started: set[str]) -> None:
    # the other side: the test would pass on an empty list of modules
    for needed in ("textual.app", "httpx", "llmtop.sources.collector", "llmtop.tui.app"):
        assert needed in started
